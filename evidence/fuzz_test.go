package evidence

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
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
