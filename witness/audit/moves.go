package audit

import (
	"strconv"

	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
)

// Events that belong to a session although their records do not say so
// the way a syscall's do.
//
// A loginuid change: a session process with CAP_AUDIT_CONTROL (root in a
// sidecar-less deployment, the local adapter) that writes its loginuid
// moves to a fresh audit session; the kernel's LOGIN record names both
// (old-ses, ses). Left alone, the move would take it and everything it
// runs out of the session's file with nothing to say so. The engine
// delivers the LOGIN event to the session it came from and binds the new
// ses to the same session (Engine.follow, engine_linux.go).
//
// An io_uring operation the ring ran in its worker thread (io-wq): its
// event has a URINGOP record and no SYSCALL, and the kernel logs no ses
// in URINGOP. Its pid is the process's (the worker is one of its
// threads), whose ses the process accounting learnt from its exec.

const typeURingOp = 1336

// loginMove returns the audit sessions a LOGIN event moved a process
// from and to; ok is false for an event that moved nothing (a first
// loginuid, a refused change, the same session).
func loginMove(ev *Event) (from, to uint32, ok bool) {
	for _, r := range ev.Records {
		if r.Type != typeLogin {
			continue
		}
		from, to = fieldUint(r.Text, "old-ses"), fieldUint(r.Text, "ses")
		res, _ := auditfmt.Field(r.Text, "res")
		return from, to, res == "1" && from != unsetID && to != unsetID && from != to
	}
	return 0, 0, false
}

// uringSession is the audit session of an io_uring worker's event, as
// the process accounting knows its process; unsetID when it does not.
func (p *procAcct) uringSession(ev *Event) uint32 {
	for _, r := range ev.Records {
		if r.Type != typeURingOp {
			continue
		}
		pid, _ := auditfmt.Field(r.Text, "pid")
		if pr, ok := p.live[pid]; ok {
			return parseSes(pr.ses)
		}
		return unsetID
	}
	return unsetID
}

func parseSes(s string) uint32 {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return unsetID
	}
	return uint32(n)
}
