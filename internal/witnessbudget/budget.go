// Package witnessbudget bounds the bytes the witnesses' files (pcap,
// audit) take across sessions: per run (the sessions of one run id) and
// per capture volume, beside each session's own bound (its files'
// rotation). The transcript is never counted: the budget keeps the
// witnesses from taking the room the transcripts need.
//
// A spent budget stays spent: bytes once stored are not given back (the
// files are evidence, kept), and a budget that admitted small items after
// refusing a large one would leave a session's stream full of holes
// where one gap says it all.
package witnessbudget

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// Limits are the budgets in bytes; 0 is no bound.
type Limits struct{ Run, Volume int64 }

// Spent says which budget refused bytes.
type Spent int

const (
	None   Spent = iota // admitted
	Run                 // the run's budget
	Volume              // the volume's budget
)

// maxRuns bounds the runs counted apart; past it, runs not yet seen
// share one count (a pessimistic bound, never a lost one).
const maxRuns = 4096

// overflowRun is the shared count of the runs past maxRuns.
const overflowRun = "\x00"

// Budget counts the bytes taken, per run and in all. It is safe for
// concurrent use; Take is a map lookup under a mutex.
type Budget struct {
	lim Limits

	mu          sync.Mutex
	volume      int64
	runs        map[string]int64
	volumeSpent bool
	runSpent    map[string]bool
}

// New returns a budget with nothing taken.
func New(lim Limits) *Budget {
	return &Budget{lim: lim, runs: map[string]int64{}, runSpent: map[string]bool{}}
}

// Limits are the budget's bounds.
func (b *Budget) Limits() Limits { return b.lim }

// key is run's count, or the shared one past maxRuns. Callers hold mu.
func (b *Budget) key(run string) string {
	if _, ok := b.runs[run]; ok || len(b.runs) < maxRuns {
		return run
	}
	return overflowRun
}

// Add counts n bytes already stored for run (files found on the volume
// at the sidecar's start), whatever the limits.
func (b *Budget) Add(run string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.key(run)
	b.runs[k] += n
	b.volume += n
}

// Take counts n bytes for run when they fit both budgets, and otherwise
// says which is spent; once one refused, it refuses everything after.
func (b *Budget) Take(run string, n int64) Spent {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.key(run)
	switch {
	case b.volumeSpent:
		return Volume
	case b.lim.Volume > 0 && b.volume+n > b.lim.Volume:
		b.volumeSpent = true
		return Volume
	case b.runSpent[k]:
		return Run
	case b.lim.Run > 0 && b.runs[k]+n > b.lim.Run:
		b.runSpent[k] = true
		return Run
	}
	b.runs[k] += n
	b.volume += n
	return None
}

// Used is the bytes counted in all, and for run.
func (b *Budget) Used(run string) (volume, ofRun int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.volume, b.runs[b.key(run)]
}

// maxScanEntries bounds the folder entries Scan reads, so a capture root
// holding millions of files cannot hold up the start; past it, Scan stops
// and says so (what it counted so far is still counted).
const maxScanEntries = 1 << 20

// ErrScanBound is Scan's error when the capture root held more entries
// than it reads.
var ErrScanBound = errors.New("witnessbudget: too many entries in the capture root; witness files past them not counted")

// Scan sums the sizes of the witnesses' files already on the volume, per
// run: <root>/<run>/<session>/<class>/<file> for the classes given
// (vocab.PcapDir, vocab.AuditDir). The folder is read as hostile: links
// are not followed, only regular files are counted, names starting with
// "_" at the top (the sidecar's own folders) are skipped.
func Scan(root string, classes []string) (map[string]int64, error) {
	used := map[string]int64{}
	entries := 0
	list := func(dir string) []os.DirEntry {
		if entries >= maxScanEntries {
			return nil
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return nil
		}
		es, err := os.ReadDir(dir)
		if err != nil {
			return nil
		}
		if n := maxScanEntries - entries; len(es) > n {
			es = es[:n]
		}
		entries += len(es)
		return es
	}
	for _, run := range list(root) {
		if !run.IsDir() || strings.HasPrefix(run.Name(), "_") {
			continue
		}
		runDir := filepath.Join(root, run.Name())
		for _, sess := range list(runDir) {
			if !sess.IsDir() {
				continue
			}
			for _, class := range classes {
				for _, f := range list(filepath.Join(runDir, sess.Name(), class)) {
					if !f.Type().IsRegular() {
						continue
					}
					if fi, err := f.Info(); err == nil {
						used[run.Name()] += fi.Size()
					}
				}
			}
		}
	}
	if entries >= maxScanEntries {
		return used, ErrScanBound
	}
	return used, nil
}
