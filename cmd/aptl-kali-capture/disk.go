//go:build linux

package main

import (
	"log/slog"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessbudget"
)

// diskPollInterval is how often the capture volume is read; writers that
// announce large writes (the witnesses) make it read at once when they
// could reach a mark (diskstate.Monitor.Note).
const diskPollInterval = time.Second

// startDisk reads the capture volume's state from src (statfs of the
// capture root), logs it with its marks, logs every transition, and
// polls the volume until stop is called (docs/OPERATING.md, "Disk states").
func startDisk(cfg *serveConfig, src diskstate.Source, log *slog.Logger) (*diskstate.Monitor, func(), error) {
	m, err := diskstate.New(src, cfg.disk)
	if err != nil {
		return nil, nil, err
	}
	st := m.Status()
	log.Info("capture volume", diskLogAttrs(st)...)
	if st.State != diskstate.OK {
		log.Warn("capture volume is "+string(st.State)+" at start; "+diskConsequence(st.State), diskLogAttrs(st)...)
	}
	m.Subscribe(func(t diskstate.Transition) {
		attrs := append([]any{"from", string(t.From)}, diskLogAttrs(t.Status)...)
		if t.State == diskstate.OK {
			log.Info("capture volume is ok again; "+diskConsequence(t.State), attrs...)
			return
		}
		log.Warn("capture volume is "+string(t.State)+"; "+diskConsequence(t.State), attrs...)
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(stop, diskPollInterval, func(err error) { log.Warn("capture volume not read", "err", err.Error()) })
	}()
	return m, func() { close(stop); <-done }, nil
}

// diskConsequence says what a state does to the recording.
func diskConsequence(s diskstate.State) string {
	switch s {
	case diskstate.Low:
		return "the witnesses (pcap, audit) stop storing, each stream's packets or events counted in a gap; transcripts go on"
	case diskstate.Critical:
		return "new sessions are refused and the witnesses stop storing; open sessions' transcripts go on"
	}
	return "the witnesses store again and new sessions start"
}

// diskLogAttrs are a reading's log attributes: the state, the free bytes
// and the marks, never anything of a session.
func diskLogAttrs(st diskstate.Status) []any {
	return []any{"state", string(st.State), "free_bytes", st.Usage.Free, "volume_bytes", st.Usage.Size,
		"low_below", st.Marks.Low, "critical_below", st.Marks.Critical, "resume_at", st.Marks.Resume}
}

// newWitnessBudget resolves the budgets for a volume of size bytes and
// counts the witness files already on it.
func newWitnessBudget(cfg *serveConfig, size int64, log *slog.Logger) *witnessbudget.Budget {
	lim := witnessbudget.Limits{Volume: size / 100 * int64(cfg.budgetPercent), Run: size / 100 * int64(cfg.runBudgetPercent)}
	b := witnessbudget.New(lim)
	used, err := witnessbudget.Scan(cfg.root, []string{vocab.PcapDir, vocab.AuditDir})
	if err != nil {
		log.Warn("witness files on the volume not all counted", "err", err.Error())
	}
	for run, n := range used {
		b.Add(run, n)
	}
	v, _ := b.Used("")
	log.Info("witness budget", "volume_bytes", lim.Volume, "run_bytes", lim.Run, "used_bytes", v)
	return b
}
