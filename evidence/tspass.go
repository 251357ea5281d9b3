package evidence

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The typescript is read once, in order, and each byte is hashed once.
//
// Two kinds of record vouch for its bytes: data records (the digest of
// each stored chunk) and the prefix digests of checkpoints and the close
// record (the digest of the whole file up to a size). Checking both
// directly would hash every byte twice. Instead the pass keeps one
// running digest of the file and compares it at each trusted prefix
// claim; the data records read since the previous claim are not hashed on
// their own while the prefixes match. A claim vouches for them only once
// a later trusted checkpoint covers the record holding it (a checkpoint's
// signature covers the records before it, never its own attributes): the
// records of a window no later signature covers, and of a window whose
// claim does not match, are then read again and checked one by one, which
// locates the damage to the record. After the first damage the running
// digest can tell nothing more, and the remaining records are checked one
// by one, so one flipped byte is one finding. BenchmarkVerify measures the
// pass against sha256sum.

// dataClaim is a data record's claim on typescript bytes.
type dataClaim struct {
	seq, off, len int64
	sha           string
}

// window is the data records a matching prefix claim (in record claimSeq)
// vouches for, once a later signature covers that record.
type window struct {
	claimSeq int64
	recs     []dataClaim
}

// maxDeferred bounds the data records waiting for a prefix claim; past
// it, records are checked at once (their bytes hashed twice).
const maxDeferred = 1 << 16

// readChunk is the unit of every read of a record file.
const readChunk = 1 << 20

type tsPass struct {
	v        *verifier
	f        *os.File
	size     int64
	prefix   hash.Hash // digest of bytes [0, pos)
	pos      int64
	one      hash.Hash // a single record's digest
	buf      []byte
	deferred []dataClaim
	windows  []window
	good     int64 // the prefix the last matching claim vouched for
	recEnd   int64 // where the last data record's bytes end
	// unexplained: a mismatching prefix claim no data record explains,
	// waiting for a trusted signature to cover it.
	unexplained *prefixDamage
	// damaged: damage was reported, so the running digest tells nothing
	// more and every later record is checked on its own. ended: the file
	// ends inside bytes a record vouches for (reported once).
	damaged, ended bool
}

func newTSPass(v *verifier, f *os.File, size int64) *tsPass {
	return &tsPass{v: v, f: f, size: size, prefix: sha256.New(), one: sha256.New(), buf: make([]byte, readChunk)}
}

// read feeds bytes [off, off+n) of the file to the writers. The caller has
// checked that the file holds them; a file that ends sooner (it shrank
// since) is io.ErrUnexpectedEOF. The copy is the standard library's, so
// the loop over the file has no condition here that could run away.
func (p *tsPass) read(off, n int64, w ...io.Writer) error {
	k, err := io.CopyBuffer(io.MultiWriter(append(w, progressWriter{p.v})...), io.NewSectionReader(p.f, off, n), p.buf)
	if err == nil && k < n {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// progressWriter reports the bytes written to it as verify's progress.
type progressWriter struct{ v *verifier }

func (w progressWriter) Write(b []byte) (int, error) {
	w.v.progress(int64(len(b)))
	return len(b), nil
}

// advance hashes the file into the running digest up to to.
func (p *tsPass) advance(to int64) error {
	if to <= p.pos {
		return nil
	}
	err := p.read(p.pos, to-p.pos, p.prefix)
	p.pos = to
	return err
}

// header checks the script header line, bytes [0, n), against the open
// record's digest: the running digest there is the header's.
func (p *tsPass) header(n int64, sum string) {
	readable := n <= p.size && p.advance(n) == nil
	if actual := hex.EncodeToString(p.prefix.Sum(nil)); !readable || actual != sum {
		a := p.v.damage(KindHeaderMismatch, vocab.TypescriptFile, 0, 0, n, "bytes 0..%d (the script header line) differ from the open record", n)
		if readable {
			a.differs(sum, actual)
		}
		p.damaged = true
	}
	p.good = n
}

// data takes a data record's claim on bytes [c.off, c.off+c.len).
func (p *tsPass) data(c dataClaim) {
	p.recEnd = c.off + c.len
	if p.ended {
		return
	}
	if c.off+c.len > p.size {
		p.v.damage(KindFileTruncated, vocab.TypescriptFile, c.seq, p.size, c.off+c.len,
			"typescript ends at %d, inside this record's bytes %d..%d (truncated)", p.size, c.off, c.off+c.len).differs(c.off+c.len, p.size)
		p.ended = true
		return
	}
	if p.damaged || c.off < p.pos {
		p.check(c)
		return
	}
	if err := p.advance(c.off); err != nil {
		p.readFailed(c.seq, err)
		return
	}
	if len(p.deferred) >= maxDeferred {
		p.one.Reset()
		err := p.read(c.off, c.len, p.prefix, p.one)
		p.pos += c.len
		if err != nil {
			p.readFailed(c.seq, err)
			return
		}
		p.compare(c)
		return
	}
	if err := p.advance(c.off + c.len); err != nil {
		p.readFailed(c.seq, err)
		return
	}
	p.deferred = append(p.deferred, c)
}

// check reads a record's bytes again and compares their digest; it
// reports whether they differ.
func (p *tsPass) check(c dataClaim) bool {
	if c.off+c.len > p.size {
		if !p.ended {
			p.v.damage(KindFileTruncated, vocab.TypescriptFile, c.seq, p.size, c.off+c.len,
				"typescript ends at %d, inside this record's bytes %d..%d (truncated)", p.size, c.off, c.off+c.len).differs(c.off+c.len, p.size)
			p.ended = true
		}
		return true
	}
	p.one.Reset()
	if err := p.read(c.off, c.len, p.one); err != nil {
		p.readFailed(c.seq, err)
		return true
	}
	return p.compare(c)
}

// compare reports a record whose digest (in p.one) differs.
func (p *tsPass) compare(c dataClaim) bool {
	actual := hex.EncodeToString(p.one.Sum(nil))
	if actual == c.sha {
		return false
	}
	p.v.damage(KindDataDigestMismatch, vocab.TypescriptFile, c.seq, c.off, c.off+c.len,
		"bytes %d..%d differ from the recorded digest", c.off, c.off+c.len).differs(c.sha, actual)
	p.damaged = true
	return true
}

func (p *tsPass) readFailed(seq int64, err error) {
	p.v.anomaly(KindFileUnreadable, vocab.TypescriptFile, seq, -1, "%v", err)
	p.damaged, p.ended = true, true
}

// checkAll checks records one by one; it reports whether one differed.
func (p *tsPass) checkAll(recs []dataClaim) bool {
	found := false
	for _, c := range recs {
		if p.ended {
			break
		}
		found = p.check(c) || found
	}
	return found
}

// claim takes a trusted prefix claim, in record seq: the first size bytes
// of the file have digest sum.
func (p *tsPass) claim(seq, size int64, sum string) {
	if p.damaged || p.ended {
		return // explained by the damage already reported
	}
	switch {
	case size > p.size:
		p.checkAll(p.deferred)
		p.deferred = nil
		if !p.ended {
			p.v.damage(KindFileTruncated, vocab.TypescriptFile, seq, p.size, size,
				"file ends at %d, inside the %d bytes record %d vouches for (truncated)", p.size, size, seq).differs(size, p.size)
			p.ended = true
		}
		return
	case size < p.pos:
		// The recorder states the sizes after the records it wrote: a
		// claim short of them cannot be compared in this pass.
		p.checkAll(p.deferred)
		p.deferred = nil
		p.v.anomaly(KindRecordMalformed, vocab.LogFile, seq, -1,
			"record vouches for %d typescript bytes, fewer than the data records before it reach (%d)", size, p.pos)
		p.damaged = true
		return
	}
	if err := p.advance(size); err != nil {
		p.readFailed(seq, err)
		return
	}
	actual := hex.EncodeToString(p.prefix.Sum(nil))
	if actual == sum {
		if len(p.deferred) > 0 {
			p.windows = append(p.windows, window{claimSeq: seq, recs: p.deferred})
		}
		p.deferred, p.good = nil, size
		return
	}
	if !p.checkAll(p.deferred) {
		// Every data record checks out: the damage is in the bytes no data
		// record covers, past the last one (the trailer line, or bytes a
		// crash left unrecorded), or the claim itself is false. Only a
		// later trusted signature makes the claim evidence (covered); a
		// claim none covers (a log re-chained without the host key) is
		// the log's finding, not the typescript's.
		p.unexplained = &prefixDamage{seq: seq, from: max(p.good, p.recEnd), to: size, expected: sum, actual: actual}
	}
	p.deferred, p.damaged = nil, true
}

// prefixDamage is a prefix claim that did not match while every data
// record before it did: reported once a trusted signature covers it.
type prefixDamage struct {
	seq, from, to    int64
	expected, actual string // the claim's digest of the prefix, and the file's
}

// covered drops the windows whose claims lie before record seq, which a
// trusted signature has just covered: their records are vouched for.
func (p *tsPass) covered(seq int64) {
	if d := p.unexplained; d != nil && d.seq < seq {
		p.v.damage(KindFileDigestMismatch, vocab.TypescriptFile, d.seq, d.from, d.to,
			"bytes %d..%d differ from the digest record %d vouches for (no data record covers them)", d.from, d.to, d.seq).differs(d.expected, d.actual)
		p.unexplained = nil
	}
	i := 0
	for i < len(p.windows) && p.windows[i].claimSeq < seq {
		i++
	}
	p.windows = p.windows[i:]
}

// finish checks one by one the records no covered claim vouched for.
func (p *tsPass) finish() {
	for _, w := range p.windows {
		p.checkAll(w.recs)
	}
	p.checkAll(p.deferred)
	p.windows, p.deferred = nil, nil
}
