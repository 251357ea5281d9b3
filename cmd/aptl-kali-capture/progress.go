package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// verify's progress line: on stderr, only when stderr is a terminal and
// the transcripts add up to more than progressThreshold, redrawn at most
// every progressEvery and erased at the end. It is never written to a
// pipe or a file, and never with --json.

const (
	progressThreshold = 256 << 20
	progressEvery     = 200 * time.Millisecond
)

type progress struct {
	w     io.Writer
	total int64
	read  int64
	last  time.Time
	shown bool
}

// newProgress returns a progress line for total bytes, or nil when total
// is too small to be worth one.
func newProgress(w io.Writer, total int64) *progress {
	if total <= progressThreshold {
		return nil
	}
	return &progress{w: w, total: total}
}

func (p *progress) add(n int64) {
	p.read += n
	if now := time.Now(); now.Sub(p.last) >= progressEvery {
		p.last, p.shown = now, true
		// Files may grow or lie about their size: the share is capped.
		pct := min(100, p.read*100/p.total)
		fmt.Fprintf(p.w, "\r\x1b[Kverify: %d of %d MiB read (%d%%)", p.read>>20, p.total>>20, pct)
	}
}

// done erases the line.
func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

// estimateBytes adds up the sizes of the typescript and timing files of
// the sessions to verify (a run folder's in either layout): the progress
// line's 100%. It only stats; the verifier opens the files as hostile.
func estimateBytes(runDir string, dirs []string) int64 {
	if runDir != "" {
		for _, pattern := range []string{"*", "kali-side/*"} {
			m, _ := filepath.Glob(filepath.Join(runDir, pattern))
			dirs = append(dirs, m...)
		}
	}
	var total int64
	for _, d := range dirs {
		for _, name := range []string{vocab.TypescriptFile, vocab.TimingFile} {
			if st, err := os.Lstat(filepath.Join(d, vocab.PTYDir, name)); err == nil && st.Mode().IsRegular() {
				total += st.Size()
			}
		}
	}
	return total
}
