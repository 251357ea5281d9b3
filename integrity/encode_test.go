package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"
)

// checkDataLine holds appendDataLine to json.Marshal: where it writes a
// line, the bytes are json.Marshal's for the same record; where it does
// not, it leaves dst as it was, and the record is one it must not write.
func checkDataLine(t *testing.T, seq uint64, prev string, when time.Time, typ string, d Data, sum [32]byte) {
	t.Helper()
	prefix := []byte("kept|")
	got, ok := appendDataLine(bytes.Clone(prefix), seq, prev, when, typ, &d, &sum)
	d.SHA256 = hex.EncodeToString(sum[:])
	want, err := json.Marshal(Record{Seq: seq, Prev: prev, Time: when, Type: typ, Data: &d})
	if !ok {
		if !bytes.Equal(got, prefix) {
			t.Fatalf("declined, but changed dst to %q", got)
		}
		if _, jerr := when.MarshalJSON(); plainJSON(prev) && plainJSON(typ) && plainJSON(d.Stream) && jerr == nil {
			t.Fatalf("declined a record it can write: prev %q type %q stream %q time %v", prev, typ, d.Stream, when)
		}
		return
	}
	if err != nil {
		t.Fatalf("wrote %q where json.Marshal fails: %v", got, err)
	}
	if !bytes.Equal(got, append(prefix, want...)) {
		t.Fatalf("line differs from json.Marshal:\n got %s\nwant %s%s", got, prefix, want)
	}
}

// TestDataLineIsJSONMarshal: the shapes a session writes (both streams,
// offsets from 0 to past 4 GiB, a counted-not-stored -1, times with and
// without trailing zero nanoseconds), and the ones it must decline.
func TestDataLineIsJSONMarshal(t *testing.T) {
	sum := sha256.Sum256([]byte("bytes"))
	prev := Seed("run-1", "s-1")
	times := []time.Time{
		time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 1, 14, 0, 0, 120000000, time.UTC),
		time.Date(2026, 12, 1, 14, 0, 0, 123456789, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 1, time.UTC),
		time.Date(2026, 12, 1, 14, 0, 0, 5, time.FixedZone("", 3600)),
	}
	for _, when := range times {
		for _, d := range []Data{{Stream: "o", Off: 0, Len: 1}, {Stream: "i", Off: 5 << 30, Len: 1 << 20}, {Stream: "e", Off: -1, Len: 0}} {
			checkDataLine(t, 12345678901, prev, when, "data", d, sum)
		}
	}
	checkDataLine(t, 0, prev, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), "data", Data{Stream: "o"}, sum)
	checkDataLine(t, 0, prev, time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC), "data", Data{Stream: "o"}, sum)
	checkDataLine(t, 0, prev, time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), "data", Data{Stream: "o"}, sum)
	for _, offset := range []int{24 * 3600, -24 * 3600, 24*3600 - 60, -(24*3600 - 60)} {
		checkDataLine(t, 0, prev, time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", offset)), "data", Data{Stream: "o"}, sum)
	}
	for _, odd := range []string{"a<b", "a\"b", "a\\b", "\x1f", "é", "a&b", "\u2028"} {
		checkDataLine(t, 1, odd, times[0], "data", Data{Stream: "o"}, sum)
		checkDataLine(t, 1, prev, times[0], odd, Data{Stream: "o"}, sum)
		checkDataLine(t, 1, prev, times[0], "data", Data{Stream: odd}, sum)
	}
}

// FuzzDataLineIsJSONMarshal: the same for any record of the shape, at any
// time and zone offset.
func FuzzDataLineIsJSONMarshal(f *testing.F) {
	f.Add(uint64(3), Seed("r", "s"), int64(1764597600), int64(123456789), int32(0), "data", "o", int64(0), int64(11), []byte("x"))
	f.Add(uint64(0), "<&>", int64(-62135596800), int64(0), int32(86400), "gap", "\xff", int64(-1), int64(-5), []byte{})
	f.Add(uint64(9), "ab", int64(253402300799), int64(999999999), int32(-3600), "data", "i", int64(7), int64(1), []byte("y"))
	f.Fuzz(func(t *testing.T, seq uint64, prev string, sec, nsec int64, offset int32, typ, stream string, off, n int64, content []byte) {
		when := time.Unix(sec, nsec).In(time.FixedZone("", int(offset)))
		checkDataLine(t, seq, prev, when, typ, Data{Stream: stream, Off: off, Len: n}, sha256.Sum256(content))
	})
}
