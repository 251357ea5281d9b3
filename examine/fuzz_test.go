package examine

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/integrity"
)

// writtenLog is a log as the sidecar's writer produces it, unsigned.
func writtenLog(t testing.TB) []byte {
	var b bytes.Buffer
	at := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	w := integrity.NewWriter(&b, "run-1", "s-1", nil, func() time.Time { return at })
	if err := w.Append("open", map[string]string{"format": "x", "cmd": "echo \"\x1b\"\n"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Data("in", 10, []byte("ls\r")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append("close", map[string]string{"reason": "eof"}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// FuzzLogRecords reads a log with the examiner's bounded line reader and
// decodes each complete line as a record. Lines are never longer than the
// bound, a line is refused as too long only when it is, and the lines read
// are the file's bytes; a record that decodes is byte for byte the line
// the writer would produce for it, and a refused one yields no record.
func FuzzLogRecords(f *testing.F) {
	f.Add(writtenLog(f), uint16(4096))
	f.Add(writtenLog(f), uint16(100))
	f.Add([]byte(`{"seq":0,"prev":"","t":"2025-01-02T03:04:05Z","type":"open"}`+"\n"), uint16(0))
	f.Add([]byte(`{"seq":0,"prev":"","t":"2025-01-02T03:04:05Z","type":"open","type":"x"}`+"\n"), uint16(512))
	f.Add([]byte(`{"seq":1, "prev":"","t":"2025-01-02T03:04:05Z","type":"open","extra":1}`+"\n\n"), uint16(512))
	f.Add([]byte("no newline"), uint16(3))
	f.Fuzz(func(t *testing.T, log []byte, bound uint16) {
		max := 16 + int(bound)%4096
		br := bufio.NewReaderSize(bytes.NewReader(log), 16) // smallest buffer: lines span many reads
		var read []byte
		for {
			ln, err := readBoundedLine(br, max)
			rest := log[len(read):]
			if errors.Is(err, errRecordTooLong) {
				if i := bytes.IndexByte(rest, '\n'); i >= 0 && i <= max || i < 0 && len(rest) <= max {
					t.Fatalf("line of %d bytes refused as longer than %d", i, max)
				}
				return
			}
			if err == io.EOF {
				if len(rest) != 0 {
					t.Fatalf("EOF with %d bytes unread", len(rest))
				}
				return
			}
			if err != nil || len(ln.text) > max {
				t.Fatalf("line of %d bytes (bound %d), err %v", len(ln.text), max, err)
			}
			read = append(read, ln.text...)
			if ln.complete {
				read = append(read, '\n')
			}
			if !bytes.HasPrefix(log, read) || !ln.complete && len(read) != len(log) {
				t.Fatalf("lines read are not the file's bytes: % x", read)
			}
			if ln.complete {
				checkRecordLine(t, ln.text)
			}
		}
	})
}

func checkRecordLine(t *testing.T, line []byte) {
	r, err := parseRecord(line)
	if err != nil {
		if !reflect.ValueOf(r).IsZero() {
			t.Fatalf("record refused (%v) but returned %+v", err, r)
		}
		return
	}
	canon, err := json.Marshal(r)
	if err != nil || !bytes.Equal(canon, line) {
		t.Fatalf("accepted %q, which the writer would write as %q", line, canon)
	}
}

// FuzzTee reads a tee through teeStream and compares each direction's
// bytes with a plain reading of the format: every line that is a JSON
// object with a number ts, dir "out" or "err" and base64 b64 contributes
// its bytes to its direction, and any other line none. Reads of any size
// give the same bytes.
func FuzzTee(f *testing.F) {
	f.Add([]byte(`{"ts":1,"dir":"out","b64":"aGk="}`+"\n"+`{"ts":2,"dir":"err","b64":"eA=="}`+"\n"), uint8(1))
	f.Add([]byte(`{"ts":1,"dir":"out","b64":"aGk="}`+"\nnot json\n"+`{"dir":"out","b64":"eA=="}`+"\n"+`{"ts":3,"dir":"out","b64":""}`), uint8(3))
	f.Add([]byte(`{"ts":1,"dir":"in","b64":"aGk="}`+"\n\n"+`{"ts":1e400,"dir":"out","b64":"!"}`), uint8(0))
	f.Add([]byte(`{"ts":null,"dir":"out","b64":null}`+"\n"+`{"ts":1,"dir":"out","b64":"aGk=","ts":2}`), uint8(7))
	f.Fuzz(func(t *testing.T, tee []byte, chunk uint8) {
		for _, dir := range []string{"out", "err"} {
			want, lines := referenceTee(tee, dir)
			ts := &teeStream{br: bufio.NewReaderSize(bytes.NewReader(tee), 16), dir: dir}
			var got []byte
			p := make([]byte, 1+int(chunk)%8)
			for {
				n, err := ts.Read(p)
				got = append(got, p[:n]...)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%s: read: %v", dir, err)
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s: read %q, the lines carry %q", dir, got, want)
			}
			if ts.line != lines || ts.off != int64(len(tee)) {
				t.Fatalf("%s: stopped at line %d offset %d, the tee has %d lines, %d bytes", dir, ts.line, ts.off, lines, len(tee))
			}
		}
	})
}

// referenceTee is the tee format read the simplest way (all lines are far
// below maxTeeLine here).
func referenceTee(tee []byte, dir string) (data []byte, lines int) {
	text := strings.Split(string(tee), "\n")
	if text[len(text)-1] == "" {
		text = text[:len(text)-1]
	}
	for _, line := range text {
		var l struct {
			TS  *float64 `json:"ts"`
			Dir string   `json:"dir"`
			B64 *string  `json:"b64"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || l.TS == nil || l.B64 == nil || l.Dir != dir {
			continue
		}
		if b, err := base64.StdEncoding.DecodeString(*l.B64); err == nil {
			data = append(data, b...)
		}
	}
	return data, len(text)
}
