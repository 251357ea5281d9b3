package examine

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

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
