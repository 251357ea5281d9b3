package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Witness files bound by records: a witness (packets, audit records)
// writes its files in a folder of the session, and the chain vouches for
// each: a record of every finished file (size, SHA-256, what it holds), the
// last signed checkpoint's current file (a prefix, for a session that did
// not close), and the close record's file count. A file that is missing,
// shorter (truncated), longer, different, or not named by any signed
// record (extra) is an anomaly; what the witness did not store is a gap
// (its gap records). The files are hostile like every other: opened with
// safefs.OpenRegular, read no further than the records claim, and parsed only
// once their digest matched. One witnessClass describes each witness's
// names; the checks are the same for all.

// witnessClass is the vocabulary of one witness's files.
type witnessClass struct {
	dir        string         // its folder in the session folder
	fileName   *regexp.Regexp // the only form of name it gives a file
	fileType   string         // the record of a finished file
	countAttr  string         // what that record counts (packets, records)
	ckFile     string         // checkpoint attributes of the current file
	ckSize     string
	ckSHA256   string
	closeFiles string // the close record's file count
	stream     string // the stream of its gap records
	stateAttr  string // the open record's state and why
	reasonAttr string
	// missingKind and extraKind are the anomaly kinds of a file a signed
	// record names that is not there, and of one no signed record names.
	missingKind, extraKind Kind
	// count counts what a file holds, once its digest matched; it may
	// learn more of it for the verifier (the audit records' sessions and
	// terminals, audit.go).
	count func(v *verifier, rel string, r io.Reader) (int64, error)
}

// WitnessReport is what the record says of one witness's files.
type WitnessReport struct {
	State  string `json:"state"` // on, unavailable, disabled
	Reason string `json:"reason,omitempty"`
	Files  int    `json:"files"` // finished files a signed record vouches for
	Count  int64  `json:"-"`     // what they hold (packets, records)
}

// maxWitnessEntries bounds the listing of a hostile witness folder.
const maxWitnessEntries = 100000

// witnessEvidence is what the replay collected about one witness's files.
type witnessEvidence struct {
	class       *witnessClass
	rep         *WitnessReport // nil until the open record or a file record
	files       []fileClaim    // file records, in order
	checkpoints []fileClaim    // checkpoints' current file, in order
	closeFiles  string         // the close record's file count
	closed      bool
	gaps        []Gap
}

// fileClaim is a record's claim about one file.
type fileClaim struct {
	seq          int64
	name, sha256 string
	size, count  int64
}

// collect collects a record's claims, before its signature is known; check
// uses only those a signature covers.
func (w *witnessEvidence) collect(v *verifier, r *integrity.Record, seq int64) {
	c := w.class
	switch r.Type {
	case vocab.TypeOpen:
		if st := r.Attrs[c.stateAttr]; st != "" {
			w.rep = &WitnessReport{State: st, Reason: r.Attrs[c.reasonAttr]}
		}
	case c.fileType:
		size, err1 := strconv.ParseInt(r.Attrs[vocab.AttrBytes], 10, 64)
		count, err2 := strconv.ParseInt(r.Attrs[c.countAttr], 10, 64)
		if err1 != nil || err2 != nil || size < 0 || count < 0 {
			v.anomaly(KindRecordMalformed, vocab.LogFile, seq, -1, "%s record without a plausible size or %s count", c.fileType, c.countAttr)
			size = -1
		}
		w.files = append(w.files, fileClaim{seq: seq, name: r.Attrs[vocab.AttrFile], sha256: r.Attrs[vocab.AttrSHA256], size: size, count: count})
	case vocab.TypeCheckpoint:
		if name := r.Attrs[c.ckFile]; name != "" {
			size, err := strconv.ParseInt(r.Attrs[c.ckSize], 10, 64)
			if err != nil || size < 0 {
				size = -1
			}
			w.checkpoints = append(w.checkpoints, fileClaim{seq: seq, name: name, sha256: r.Attrs[c.ckSHA256], size: size})
		}
	case vocab.TypeClose:
		w.closed = true
		w.closeFiles = r.Attrs[c.closeFiles]
	case vocab.TypeGap:
		if r.Attrs[vocab.AttrStream] == c.stream {
			n, _ := strconv.ParseInt(r.Attrs[vocab.AttrCount], 10, 64)
			w.gaps = append(w.gaps, Gap{Seq: seq, Reason: r.Attrs[vocab.AttrReason], Stream: c.stream, Count: n})
		}
	}
}

// check checks the witness's folder against the signed claims.
func (w *witnessEvidence) check(v *verifier) {
	w.fillGaps(v)
	signed := func(c fileClaim) bool { return c.seq <= v.rep.LastVerifiedSeq }
	expected := map[string]fileClaim{}
	for _, c := range w.files {
		if !signed(c) {
			continue
		}
		if !w.class.fileName.MatchString(c.name) {
			v.anomaly(KindRecordMalformed, vocab.LogFile, c.seq, -1, "%s record names %q, not a %s file name", w.class.fileType, c.name, w.class.dir)
			continue
		}
		expected[c.name] = c
	}
	var current *fileClaim
	for i := range w.checkpoints {
		if c := w.checkpoints[i]; signed(c) && w.class.fileName.MatchString(c.name) {
			current = &w.checkpoints[i]
		}
	}
	if current != nil {
		if _, finished := expected[current.name]; finished {
			current = nil
		}
	}
	if w.rep == nil && len(expected) == 0 && current == nil {
		w.noExtra(v, nil, nil)
		return
	}
	if w.rep == nil {
		w.rep = &WitnessReport{}
	}
	names := make([]string, 0, len(expected))
	for name := range expected {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if w.checkFile(v, expected[name]) {
			w.rep.Files++
			w.rep.Count += expected[name].count
		}
	}
	if current != nil {
		w.checkPrefix(v, *current)
	}
	w.checkCount(v, len(expected))
	w.noExtra(v, expected, current)
}

// fillGaps gives the witness's gaps among the report's gaps their counts.
func (w *witnessEvidence) fillGaps(v *verifier) {
	for _, g := range w.gaps {
		for i := range v.rep.Gaps {
			if v.rep.Gaps[i].Seq == g.Seq {
				v.rep.Gaps[i].Count = g.Count
			}
		}
	}
}

// checkCount compares the close record's file count with the signed file records.
func (w *witnessEvidence) checkCount(v *verifier, n int) {
	if !w.closed || w.closeFiles == "" || v.closeSeq > v.rep.LastVerifiedSeq {
		return
	}
	if w.closeFiles != strconv.Itoa(n) {
		v.anomaly(KindCountMismatch, vocab.LogFile, v.closeSeq, -1, "close record counts %s %s files, the signed %s records %d", w.closeFiles, w.class.dir, w.class.fileType, n).differs(w.closeFiles, n)
	}
}

func (w *witnessEvidence) rel(name string) string { return w.class.dir + "/" + name }

// checkFile checks one finished file; it reports whether it is intact.
func (w *witnessEvidence) checkFile(v *verifier, c fileClaim) bool {
	rel := w.rel(c.name)
	f, size, err := safefs.OpenRegular(v.rep.Dir, rel)
	if errors.Is(err, fs.ErrNotExist) {
		v.anomaly(w.class.missingKind, rel, c.seq, -1, "missing: record %d vouches for this file (%d bytes, %d %s)", c.seq, c.size, c.count, w.class.countAttr)
		return false
	}
	if err != nil {
		v.anomaly(KindFileUnreadable, rel, c.seq, -1, "%v", err)
		return false
	}
	defer f.Close()
	switch {
	case c.size < 0:
		return false
	case size < c.size:
		v.damage(KindFileTruncated, rel, c.seq, size, c.size, "file ends at %d, inside the %d bytes record %d vouches for (truncated)", size, c.size, c.seq).differs(c.size, size)
		return false
	case size > c.size:
		v.damage(KindFileAppended, rel, c.seq, c.size, size, "file is %d bytes, record %d vouches for %d (bytes appended)", size, c.seq, c.size).differs(c.size, size)
		return false
	}
	if !digestMatches(v, f, c, rel) {
		return false
	}
	// A file of no bytes holds no items of any class: the writer made it
	// and the volume refused its first write (a full disk), and its record
	// says 0 bytes. It has no header to parse; reading it as a damaged
	// file would turn a full disk into a false tampered.
	var n int64
	if c.size > 0 {
		n, err = w.class.count(v, rel, io.NewSectionReader(f, 0, c.size))
	}
	if err != nil || n != c.count {
		v.anomaly(KindCountMismatch, rel, c.seq, -1, "holds %d %s (%v), record %d counts %d", n, w.class.countAttr, err, c.seq, c.count).differs(c.count, n)
		return false
	}
	return true
}

// checkPrefix checks the file that was being written at the last signed
// checkpoint of a session that did not close.
func (w *witnessEvidence) checkPrefix(v *verifier, c fileClaim) {
	rel := w.rel(c.name)
	f, size, err := safefs.OpenRegular(v.rep.Dir, rel)
	if err != nil {
		v.anomaly(KindFileUnreadable, rel, c.seq, -1, "the last signed checkpoint vouches for %d bytes of this file: %v", c.size, err)
		return
	}
	defer f.Close()
	if c.size < 0 || size < c.size {
		v.damage(KindFileTruncated, rel, c.seq, size, c.size, "file ends at %d, inside the %d bytes checkpoint %d vouches for (truncated)", size, c.size, c.seq).differs(c.size, size)
		return
	}
	digestMatches(v, f, c, rel)
}

// digestMatches compares the first c.size bytes of f with c's digest.
func digestMatches(v *verifier, f *os.File, c fileClaim, rel string) bool {
	h := sha256.New()
	if n, _ := io.Copy(h, io.NewSectionReader(f, 0, c.size)); n != c.size || hex.EncodeToString(h.Sum(nil)) != c.sha256 {
		v.damage(KindFileDigestMismatch, rel, c.seq, 0, c.size, "bytes 0..%d differ from the digest record %d vouches for (altered)", c.size, c.seq).
			differs(c.sha256, hex.EncodeToString(h.Sum(nil)))
		return false
	}
	return true
}

// noExtra reports every entry of the folder that no signed record names:
// a file added after the fact, or one whose record was never signed. The
// folder itself must be a real directory.
func (w *witnessEvidence) noExtra(v *verifier, expected map[string]fileClaim, current *fileClaim) {
	dir := w.class.dir
	path := filepath.Join(v.rep.Dir, dir)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		v.anomaly(KindFileUnreadable, dir, -1, -1, "%v", err)
		return
	case !fi.IsDir():
		v.anomaly(KindFileUnreadable, dir, -1, -1, "%s", (&safefs.NotRegularError{Path: dir, Kind: safefs.DescribeMode(fi.Mode())}).Error())
		return
	}
	d, err := os.Open(path)
	if err != nil {
		v.anomaly(KindFileUnreadable, dir, -1, -1, "%v", err)
		return
	}
	defer d.Close()
	entries, err := d.ReadDir(maxWitnessEntries + 1)
	if err != nil && err != io.EOF {
		v.anomaly(KindFileUnreadable, dir, -1, -1, "%v", err)
	}
	if len(entries) > maxWitnessEntries {
		v.anomaly(KindFileUnreadable, dir, -1, -1, "more than %d entries; not listed further", maxWitnessEntries)
		entries = entries[:maxWitnessEntries]
	}
	for _, e := range entries {
		if _, ok := expected[e.Name()]; ok || (current != nil && current.name == e.Name()) {
			continue
		}
		v.anomaly(w.class.extraKind, w.rel(e.Name()), -1, -1, "extra: no signed record vouches for this file")
	}
}
