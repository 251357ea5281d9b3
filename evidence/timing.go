package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// prefixClaim is a trusted record's claim that the first size bytes of a
// file have digest sum.
type prefixClaim struct {
	seq, size int64
	sum       string
}

// checkTimingFile reads the timing file once, after the replay: the
// trusted prefix claims the replay collected are compared as the running
// digest passes them, and, when scan is set, every line is parsed as the
// recorder writes it (scriptfmt, the one parser of the format), up to
// scanLen bytes (a session in progress is parsed up to its last signed
// size: past it a line may be half written). The I and O totals are then
// compared with the stored bytes of the chain.
func (v *verifier) checkTimingFile(scan bool, scanLen int64) {
	c := &claimHasher{v: v, name: vocab.TimingFile, h: sha256.New(), claims: v.tmClaims}
	src := io.TeeReader(&progressReader{r: io.NewSectionReader(v.tm, 0, v.tmSize), v: v}, c)
	var in, out int64
	var scanErr error
	if scan {
		scanErr = scriptfmt.Scan(io.LimitReader(src, scanLen), vocab.TimingFile, func(e scriptfmt.Entry) error {
			switch e.Kind {
			case 'I':
				in += e.N
			case 'O':
				out += e.N
			}
			return nil
		})
	}
	if _, err := io.CopyBuffer(io.Discard, src, make([]byte, readChunk)); err != nil {
		v.anomaly(KindFileUnreadable, vocab.TimingFile, -1, -1, "%v", err)
		return
	}
	c.end(v.tmSize)
	switch {
	case c.damaged || !scan:
		// A digest mismatch is the finding; what the damaged lines parse
		// to would only restate it.
	case scanErr != nil:
		off := int64(-1)
		var le *scriptfmt.LineError
		if errors.As(scanErr, &le) {
			off = le.Off
		}
		v.anomaly(KindTimingMalformed, vocab.TimingFile, -1, off, "%v", scanErr)
	case v.closeRec != nil && v.rep.Bytes.Stored-v.untimed != in+out:
		// Without a close record (a crash, a session in progress) the
		// transcript may hold data whose log records are not written yet.
		v.anomaly(KindTimingTotals, vocab.TimingFile, v.closeSeq, c.good, "timing accounts for %d bytes (I %d + O %d), the chain for %d stored and timed",
			in+out, in, out, v.rep.Bytes.Stored-v.untimed).differs(v.rep.Bytes.Stored-v.untimed, in+out)
	}
}

// claimHasher is the running digest of a file that has no per-record
// digests (the timing file): each claim is compared as the digest
// reaches its size. The first mismatch is reported with the range since
// the last match; later claims restate it and are not compared.
type claimHasher struct {
	v       *verifier
	name    string
	h       hash.Hash
	pos     int64
	claims  []prefixClaim // in record order
	good    int64
	damaged bool
}

func (c *claimHasher) Write(b []byte) (int, error) {
	n := len(b)
	for {
		c.compareDue()
		if len(b) == 0 || len(c.claims) == 0 || c.damaged {
			c.pos += int64(len(b))
			return n, nil
		}
		k := min(int64(len(b)), c.claims[0].size-c.pos)
		c.h.Write(b[:k])
		c.pos += k
		b = b[k:]
	}
}

// compareDue compares the claims whose size the digest has reached.
func (c *claimHasher) compareDue() {
	for len(c.claims) > 0 && !c.damaged && c.claims[0].size <= c.pos {
		cl := c.claims[0]
		c.claims = c.claims[1:]
		switch {
		case cl.size < c.pos:
			c.v.anomaly(KindRecordMalformed, vocab.LogFile, cl.seq, -1, "record vouches for %d bytes of %s, fewer than an earlier record (%d)", cl.size, c.name, c.pos)
			c.damaged = true
		case hex.EncodeToString(c.h.Sum(nil)) != cl.sum:
			c.v.damage(KindFileDigestMismatch, c.name, cl.seq, c.good, cl.size, "bytes %d..%d differ from the digest record %d vouches for", c.good, cl.size, cl.seq).
				differs(cl.sum, hex.EncodeToString(c.h.Sum(nil)))
			c.damaged = true
		default:
			c.good = cl.size
		}
	}
}

// end reports the first claim past the file's end.
func (c *claimHasher) end(size int64) {
	c.compareDue()
	if len(c.claims) > 0 && !c.damaged {
		cl := c.claims[0]
		c.v.damage(KindFileTruncated, c.name, cl.seq, size, cl.size, "file ends at %d, inside the %d bytes record %d vouches for (truncated)", size, cl.size, cl.seq).differs(cl.size, size)
		c.damaged = true
	}
}

// progressReader counts what is read for the progress report.
type progressReader struct {
	r io.Reader
	v *verifier
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.v.progress(int64(n))
	return n, err
}
