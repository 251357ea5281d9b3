// Package integrity is the hash chain of a session's evidence: an
// append-only log of records, each carrying the hash of the one before,
// with heads signed by the sidecar's SSH host key (SSHSIG). The writer is
// here; the verifier that reads a chain back is package evidence, and the
// record's names are in internal/vocab.
package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/wholewrite"
)

// Record is one line of the log. The hash of a record is the SHA-256 of its
// exact line (without the newline); Prev is the hash of the line before, or
// for the first record the session seed (Seed), so the chain is bound to
// the session's identity.
type Record struct {
	Seq   uint64            `json:"seq"`
	Prev  string            `json:"prev"`
	Time  time.Time         `json:"t"`
	Type  string            `json:"type"`
	Data  *Data             `json:"data,omitempty"`
	Attrs map[string]string `json:"attrs,omitempty"`
	// Sig is a checkpoint's armored SSHSIG over HeadMessage(Prev).
	Sig string `json:"sig,omitempty"`
}

// Data describes bytes of one stream: where they are in the typescript
// (Off, or -1 when they were counted but not stored), how many, and their
// SHA-256.
type Data struct {
	Stream string `json:"stream"`
	Off    int64  `json:"off"`
	Len    int64  `json:"len"`
	SHA256 string `json:"sha256"`
}

// Seed is the chain's starting value for a session.
func Seed(runID, sessionID string) string {
	h := sha256.Sum256([]byte("aptl-kali-capture integrity v1\x00" + runID + "\x00" + sessionID))
	return hex.EncodeToString(h[:])
}

// HeadMessage is what a checkpoint signs: the session and the chain head it
// vouches for (the hash of record seq).
func HeadMessage(runID, sessionID string, seq uint64, head string) []byte {
	return []byte("aptl-kali-capture head v1\nrun " + runID + "\nsession " + sessionID +
		"\nseq " + strconv.FormatUint(seq, 10) + "\nhead " + head + "\n")
}

// maxCoalesce bounds one data record: adjacent chunks of a stream are
// merged into one record (metadata stays a small fraction of the
// transcript) up to this many bytes.
const maxCoalesce = 1 << 20

// Writer appends records to a log. It is not safe for concurrent use; the
// recorder serializes it with the transcript writes so the chain follows
// the order in which bytes were recorded.
type Writer struct {
	w          io.Writer
	run, sess  string
	signer     gossh.Signer
	now        func() time.Time
	seq        uint64
	prev       string
	pending    *Data     // data not yet written as a record: nil, or &pendingData
	pendingSum hash.Hash // running SHA-256 of pending's bytes
	// Reused from record to record, so that recording a data record
	// allocates nothing but its hash's hex (encode.go says why it matters).
	pendingData   Data
	pendingDigest [sha256.Size]byte
	// unwritten holds the lines of records made but not yet in the log,
	// in order: normally only the record being written, its buffer
	// reused for the next; after a write that failed (writeOut), the
	// records it did not store, which every later write tries first.
	unwritten []byte
	err       error // an error that left the log torn or the chain unencodable; sticky
}

// NewWriter starts a chain for a session. signer signs checkpoints; it is
// the sidecar's host key, which the workload never sees. w must not keep
// the slices it is given (io.Writer's rule): the Writer reuses the
// buffer of each line for the next.
func NewWriter(w io.Writer, runID, sessionID string, signer gossh.Signer, now func() time.Time) *Writer {
	return &Writer{w: w, run: runID, sess: sessionID, signer: signer, now: now, prev: Seed(runID, sessionID)}
}

// ContinueWriter continues a chain whose last record that checks out has
// seq nextSeq-1 and hash prev: a restarted sidecar's recovery record
// follows the log it did not close.
func ContinueWriter(w io.Writer, runID, sessionID string, signer gossh.Signer, now func() time.Time, nextSeq uint64, prev string) *Writer {
	c := NewWriter(w, runID, sessionID, signer, now)
	c.seq, c.prev = nextSeq, prev
	return c
}

// Append writes one record after any pending data.
func (c *Writer) Append(typ string, attrs map[string]string) error {
	if err := c.makePending(); err != nil {
		return err
	}
	return c.write(Record{Type: typ, Attrs: attrs})
}

// Data accounts for p, of stream, written at off in the typescript. Off -1
// means the bytes were counted but not stored because the transcript
// reached its size limit; they become a gap record with their digest.
// Contiguous chunks of one stream are coalesced; the record is written when
// something else is appended, at Flush, or at maxCoalesce.
func (c *Writer) Data(stream string, off int64, p []byte) error {
	var flushErr error
	if d := c.pending; d != nil {
		contiguous := d.Stream == stream && ((off < 0 && d.Off < 0) || (off >= 0 && off == d.Off+d.Len))
		if !contiguous || d.Len+int64(len(p)) > maxCoalesce {
			// A failed write keeps the record made (writeOut), so p is
			// accounted for whatever the log's state.
			flushErr = c.Flush()
		}
	}
	if c.pending == nil {
		c.pendingData = Data{Stream: stream, Off: off}
		c.pending = &c.pendingData
		if c.pendingSum == nil {
			c.pendingSum = sha256.New()
		}
		c.pendingSum.Reset()
	}
	c.pending.Len += int64(len(p))
	c.pendingSum.Write(p)
	if flushErr != nil {
		return flushErr
	}
	return c.err
}

// Gap records bytes that were lost or not stored, with their digest, and
// why. It is written at once, so the reason sits next to the data.
func (c *Writer) Gap(stream string, p []byte, attrs map[string]string) error {
	if err := c.makePending(); err != nil {
		return err
	}
	sum := sha256.Sum256(p)
	return c.write(Record{Type: vocab.TypeGap, Attrs: attrs,
		Data: &Data{Stream: stream, Off: -1, Len: int64(len(p)), SHA256: hex.EncodeToString(sum[:])}})
}

// TimingGap records that n stored bytes of stream have no timing entry
// (the timing write failed): the verifier then expects the timing file to
// account for that many bytes less.
func (c *Writer) TimingGap(stream string, n int, cause error) error {
	if err := c.makePending(); err != nil {
		return err
	}
	return c.write(Record{Type: vocab.TypeGap, Attrs: map[string]string{
		vocab.AttrReason: vocab.GapTimingWriteFailed, vocab.AttrStream: stream, "len": strconv.Itoa(n), vocab.AttrError: cause.Error(),
	}})
}

// Flush writes the pending data record, if any, and any record a failed
// write held back.
func (c *Writer) Flush() error {
	if err := c.makePending(); err != nil {
		return err
	}
	return c.writeOut()
}

// makePending makes the pending data record, if any, the next record,
// without writing it yet: a record that follows it is made even when the
// log cannot be written now, and both go out together (writeOut).
func (c *Writer) makePending() error {
	if c.pending == nil {
		return c.err
	}
	d := c.pending
	c.pendingSum.Sum(c.pendingDigest[:0])
	c.pending = nil
	typ := vocab.TypeData
	if d.Off < 0 {
		typ = vocab.TypeGap
	}
	var attrs map[string]string
	if d.Off < 0 {
		attrs = map[string]string{vocab.AttrReason: vocab.GapSizeLimit, "stored": "false"}
	}
	return c.makeRecord(Record{Type: typ, Data: d, Attrs: attrs}, &c.pendingDigest)
}

// Checkpoint writes a record signing the current head, with attrs (the
// recorder adds the transcript files' sizes and digests so far).
func (c *Writer) Checkpoint(attrs map[string]string) error {
	if err := c.makePending(); err != nil {
		return err
	}
	if c.seq == 0 {
		return fmt.Errorf("integrity: checkpoint before the open record")
	}
	sig, err := SignSSHSIG(c.signer, HeadNamespace, HeadMessage(c.run, c.sess, c.seq-1, c.prev))
	if err != nil {
		c.err = err
		return err
	}
	return c.write(Record{Type: vocab.TypeCheckpoint, Attrs: attrs, Sig: sig})
}

// Seq returns the number of records written.
func (c *Writer) Seq() uint64 { return c.seq }

// write makes r the next record and writes it, after any held back.
func (c *Writer) write(r Record) error {
	if err := c.makeRecord(r, nil); err != nil {
		return err
	}
	return c.writeOut()
}

// makeRecord makes r the next record: the chain's head moves to it and
// its line joins the unwritten ones, which writeOut writes. dataSum, when
// not nil, is the digest of r.Data's bytes, which the line carries in hex.
func (c *Writer) makeRecord(r Record, dataSum *[sha256.Size]byte) error {
	if c.err != nil {
		return c.err
	}
	r.Seq, r.Prev, r.Time = c.seq, c.prev, c.now().UTC()
	start := len(c.unwritten)
	line, encoded := c.unwritten, false
	if dataSum != nil && len(r.Attrs) == 0 && r.Sig == "" {
		line, encoded = appendDataLine(line, r.Seq, r.Prev, r.Time, r.Type, r.Data, dataSum)
	}
	if !encoded {
		if dataSum != nil {
			r.Data.SHA256 = hex.EncodeToString(dataSum[:])
		}
		var err error
		if line, err = marshalRecord(line, r); err != nil {
			c.unwritten = line[:start]
			c.err = fmt.Errorf("integrity: encode: %w", err)
			return c.err
		}
	}
	sum := sha256.Sum256(line[start:])
	c.unwritten = append(line, '\n')
	c.seq++
	var prev [2 * sha256.Size]byte
	c.prev = string(hex.AppendEncode(prev[:0], sum[:]))
	return nil
}

// maxUnwritten bounds the records a failing log holds back: past it the
// writer gives up (a sticky error) rather than grow without bound.
const maxUnwritten = 256 << 10

// writeOut writes the unwritten lines. The whole-record rule: a write that
// fails part-way (a full disk, a file-size limit) is cut back to the end
// of the last whole record it stored, so the log never ends in a torn
// line, and the records after it stay unwritten for the next try; the
// error is returned, not kept. Only when the cut itself fails (or w
// cannot be cut) does a torn line stay, and then the error is sticky:
// nothing may follow it.
func (c *Writer) writeOut() error {
	if len(c.unwritten) == 0 {
		return nil
	}
	n, err := c.w.Write(c.unwritten)
	if err == nil {
		c.unwritten = c.unwritten[:0]
		return nil
	}
	err = fmt.Errorf("integrity: write log: %w", err)
	whole := bytes.LastIndexByte(c.unwritten[:n], '\n') + 1
	if n > whole {
		if cerr := wholewrite.CutBack(c.w, int64(n-whole)); cerr != nil {
			c.err = errors.Join(err, cerr)
			return c.err
		}
	}
	c.unwritten = c.unwritten[:copy(c.unwritten, c.unwritten[whole:])]
	if len(c.unwritten) > maxUnwritten {
		c.err = fmt.Errorf("%w; %d bytes of records not written, past the bound", err, len(c.unwritten))
		return c.err
	}
	return err
}
