package evidence

import (
	"fmt"
	"strconv"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// What the sidecar may have written that no checkpoint signed yet is
// bounded: the recorder signs the chain head at least every 16 MiB of
// recorded transcript (checkpointBytes in recorder/evidence.go) and
// within a second of anything being recorded (syncInterval there).
// Bytes past the last trusted checkpoint beyond these bounds are not the
// sidecar's unsigned tail but something else (a forger's sparse file of
// terabytes, say), so the verifier and the startup recovery state their
// claimed size as an anomaly and do not read them: hashing them would
// cost hours and prove nothing. recorder/bound_test.go keeps the
// recorder's schedule within these bounds.
const (
	// MaxUnsignedTail bounds the typescript bytes past the last trusted
	// checkpoint (and the data records chained after it): the 16 MiB
	// schedule plus as much again for margin; the chunk that crosses the
	// schedule is at most 1 MiB from the broker (largeBatch in
	// broker/readbatch_linux.go), and a data record at most 1 MiB (maxCoalesce in
	// integrity/chain.go).
	MaxUnsignedTail = 32 << 20
	// MaxUnsignedTimingTail bounds the timing bytes past the last trusted
	// checkpoint. The timing file gains one line (under 40 bytes) per
	// recorded chunk or control event, and a second always brings a
	// signature: exceeding 64 MiB would take over 1.6 million chunks
	// recorded in a second, each costing the recorder two write calls and
	// a digest.
	MaxUnsignedTimingTail = 64 << 20
)

// signedStart is the typescript offset the last trusted checkpoint
// vouches for, or the end of the header line before any.
func (v *verifier) signedStart() int64 {
	if v.rep.LastVerifiedOffset >= 0 {
		return v.rep.LastVerifiedOffset
	}
	return v.headerLen
}

// withinUnsignedBound checks, before a data record's bytes are read, that
// they end no more than MaxUnsignedTail past the last trusted checkpoint.
// A record past it is forged or misplaced, whatever it claims: the claim
// is stated and nothing is read.
func (v *verifier) withinUnsignedBound(off, n, seq, logOff int64) bool {
	start := v.signedStart()
	if off+n-start <= MaxUnsignedTail {
		return true
	}
	v.anomaly(KindUnsignedTailTooLong, vocab.LogFile, seq, logOff,
		"data record claims %d typescript bytes at offset %d, reaching %d bytes past the last trusted checkpoint (offset %d): more than the %d the sidecar writes unsigned; not read",
		n, off, off+n-start, start, int64(MaxUnsignedTail))
	return false
}

// checkUnsignedTails reports a typescript or timing file that extends past
// the size the last trusted checkpoint states by more than the sidecar
// writes unsigned, stating its size without reading the tail. It returns
// whether the timing file is within its bound (and may be scanned whole).
func (v *verifier) checkUnsignedTails() (timingReadable bool) {
	if v.ts != nil {
		v.checkTail(vocab.TypescriptFile, v.tsSize, v.rep.SignedTSSize, MaxUnsignedTail)
	}
	return v.tm == nil || v.checkTail(vocab.TimingFile, v.tmSize, v.rep.SignedTMSize, MaxUnsignedTimingTail)
}

// noteSignedSizes keeps the file sizes a trusted checkpoint states, as
// claimed (whether or not the prefix still matches its digest: damage
// there is reported on its own), as the start of the unsigned tails.
func (v *verifier) noteSignedSizes(attrs map[string]string) {
	if n, err := strconv.ParseInt(attrs[vocab.AttrTSSize], 10, 64); err == nil && n >= 0 {
		v.rep.SignedTSSize = n
	}
	if n, err := strconv.ParseInt(attrs[vocab.AttrTMSize], 10, 64); err == nil && n >= 0 {
		v.rep.SignedTMSize = n
	}
}

func (v *verifier) checkTail(name string, size, signed, bound int64) bool {
	if size-signed <= bound {
		return true
	}
	v.damage(KindUnsignedTailTooLong, name, v.rep.LastVerifiedSeq, signed, size, "%s", UnsignedTailMessage(size, signed, bound))
	return false
}

// UnsignedTailMessage states a file of size bytes whose tail past the
// signed prefix is larger than bound, and is not read; the recovery
// record says the same.
func UnsignedTailMessage(size, signed, bound int64) string {
	return fmt.Sprintf("file is %d bytes, %d past the %d a trusted checkpoint vouches for: more than the %d bytes the sidecar writes unsigned; the tail is not read",
		size, size-signed, signed, bound)
}
