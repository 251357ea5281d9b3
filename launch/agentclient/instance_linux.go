package agentclient

import (
	"log/slog"
	"sync"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/agentwire"
)

// instanceLog logs each agent instance the sidecar sees answer, once: the
// first, and every later one as a restart. An agent that reports none (older
// than instance reporting) is logged once, as such. The instance is the
// agent's word (internal/agentwire): this tells restarts apart, it does not
// prove that the program answering is the real agent.
type instanceLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen bool
	last agentwire.Instance
}

// note logs in when it is not the instance that answered last; via is the
// request that brought it (probe or spawn).
func (l *instanceLog) note(in agentwire.Instance, via string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen && in.ID == l.last.ID {
		return
	}
	prev, seen := l.last, l.seen
	l.last, l.seen = in, true
	if l.log == nil { // an Agent built without NewAgent (tests)
		return
	}
	if !in.Reported() {
		l.log.Warn("launch agent reports no instance (older than instance reporting): its restarts cannot be told apart", "via", via)
		return
	}
	attrs := []any{"instance", in.ID, "agent_pid", in.PID, "agent_started", in.Started.Format(time.RFC3339Nano), "via", via}
	if seen {
		l.log.Warn("launch agent restarted: a new instance answers", append(attrs, "previous_instance", prev.ID)...)
		return
	}
	l.log.Info("launch agent instance", attrs...)
}
