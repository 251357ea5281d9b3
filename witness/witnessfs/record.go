package witnessfs

import (
	"strconv"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// FileRecord is what a witness's record of a finished file says (a
// pcap-file or audit-file record): the examiner checks the file against it
// (evidence/witnessfiles.go).
type FileRecord struct {
	Name        string
	CountAttr   string // what Count counts: vocab.AttrPackets, vocab.AttrRecords
	Count       int64
	Size        int64
	SHA256      string
	First, Last time.Time
	// WriteFailure is the error that ended the file early, if one did.
	WriteFailure string
}

// Attrs are the record's attributes.
func (r FileRecord) Attrs() map[string]string {
	a := map[string]string{
		vocab.AttrFile: r.Name, r.CountAttr: strconv.FormatInt(r.Count, 10),
		vocab.AttrBytes: strconv.FormatInt(r.Size, 10), vocab.AttrSHA256: r.SHA256,
		vocab.AttrFirst: Stamp(r.First), vocab.AttrLast: Stamp(r.Last),
	}
	if r.WriteFailure != "" {
		a["write_error"] = r.WriteFailure
	}
	return a
}

// Stamp formats a time for a record; "" when there was none.
func Stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
