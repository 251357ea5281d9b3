package integrity

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
)

// A record's line is exactly json.Marshal's encoding of its Record: the
// examiner re-encodes every line it reads and refuses one that differs
// (evidence/verify.go, parseRecord), so that is the format, and this file
// keeps the writer to it.
//
// Most records are data records, two a command of an interactive session
// (the typed line, then its output), and json.Marshal costs about as much
// as the rest of recording them: reflection and ten allocations a record.
// appendDataLine writes their bytes directly into a reused buffer. It
// handles only the shape it can write exactly as json.Marshal does (no
// attrs, no signature, strings that JSON writes unescaped, a time
// MarshalJSON accepts) and says when it cannot; every other record
// goes through json.Marshal. TestDataLineIsJSONMarshal and
// FuzzDataLineIsJSONMarshal hold the two to the same bytes.

// appendDataLine appends the line of a data record (Attrs and Sig empty)
// whose data digest is sum, and reports whether it could; when it could
// not, dst is returned unchanged.
func appendDataLine(dst []byte, seq uint64, prev string, t time.Time, typ string, d *Data, sum *[32]byte) ([]byte, bool) {
	if !plainJSON(prev) || !plainJSON(typ) || !plainJSON(d.Stream) {
		return dst, false
	}
	orig := dst
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"prev":"`...)
	dst = append(dst, prev...)
	dst = append(dst, `","t":"`...)
	// AppendText is MarshalJSON's encoding without the quotes, and fails
	// where it fails (a year outside 0-9999, a zone offset of 24 hours or
	// more).
	dst, err := t.AppendText(dst)
	if err != nil {
		return orig, false
	}
	dst = append(dst, `","type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, `","data":{"stream":"`...)
	dst = append(dst, d.Stream...)
	dst = append(dst, `","off":`...)
	dst = strconv.AppendInt(dst, d.Off, 10)
	dst = append(dst, `,"len":`...)
	dst = strconv.AppendInt(dst, d.Len, 10)
	dst = append(dst, `,"sha256":"`...)
	dst = hex.AppendEncode(dst, sum[:])
	dst = append(dst, `"}}`...)
	return dst, true
}

// plainJSON reports whether json.Marshal writes s as its bytes between
// quotes: printable ASCII without the characters it escapes (the quote,
// the backslash, and <, > and & for HTML safety).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// marshalRecord is the general encoding, for every record appendDataLine
// does not write.
func marshalRecord(dst []byte, r Record) ([]byte, error) {
	line, err := json.Marshal(r)
	return append(dst, line...), err
}
