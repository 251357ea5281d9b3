package broker

import (
	"sync/atomic"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// ClientAlive is OpenSSH's ClientAliveInterval/ClientAliveCountMax: a
// connection that sends nothing for Interval gets a keepalive@openssh.com
// global request with want-reply; after CountMax such intervals in a row
// with nothing received, the connection is closed and its sessions end as
// a client close does (close reason client-closed). This finds a half-open
// connection (the client's host gone without FIN or RST) in seconds, where
// TCP keepalive takes minutes and the sessions would stay open meanwhile.
// Interval 0 disables it.
type ClientAlive struct {
	Interval time.Duration
	CountMax int
}

// clientAliveProbe is the request OpenSSH's sshd sends. Any reply counts,
// success or failure (node ssh2 and x/crypto answer unknown global
// requests with failure): liveness is any packet read from the client,
// which trackedConn notes in connState.lastRead.
const clientAliveProbe = "keepalive@openssh.com"

// startClientAlive starts the connection's keepalive loop once; the first
// session channel calls it, as that is where gliderlabs hands the broker
// the *gossh.ServerConn. The loop ends when the connection closes.
func (srv *Server) startClientAlive(cs *connState, conn *gossh.ServerConn) {
	ca := srv.cfg.ClientAlive
	if ca.Interval <= 0 || ca.CountMax <= 0 {
		return
	}
	cs.aliveOnce.Do(func() { go srv.keepClientAlive(cs, conn, ca) })
}

// keepClientAlive probes a silent connection every interval and closes it
// after ca.CountMax silent intervals in a row. At most one probe is in
// flight: x/crypto serialises want-reply global requests, and a probe's
// goroutine returns when the reply arrives or the connection closes, so
// none outlives the connection.
func (srv *Server) keepClientAlive(cs *connState, conn *gossh.ServerConn, ca ClientAlive) {
	defer recoverSession(cs.log)
	timer := time.NewTimer(ca.Interval)
	defer timer.Stop()
	var inFlight atomic.Bool
	silent := 0
	seen := cs.lastRead.Load()
	for {
		select {
		case <-cs.closed:
			return
		case <-timer.C:
		}
		// Anything read since the last tick, a probe's reply included,
		// proves the client alive; the next tick is an interval after it.
		// (Comparing the idle time with the interval alone would count a
		// reply that came right after its probe as silence, as the tick
		// after it fires an interval after the probe.)
		if last := cs.lastRead.Load(); last != seen {
			seen, silent = last, 0
			timer.Reset(max(ca.Interval-time.Since(time.Unix(0, last)), time.Millisecond))
			continue
		}
		if silent >= ca.CountMax {
			cs.log.Info("client silent; closing connection", "remote", conn.RemoteAddr().String(),
				"interval", ca.Interval.String(), "unanswered", silent)
			conn.Close()
			return
		}
		silent++
		if inFlight.CompareAndSwap(false, true) {
			go func() {
				defer inFlight.Store(false)
				conn.SendRequest(clientAliveProbe, true, nil) // the reply is seen as a read
			}()
		}
		timer.Reset(ca.Interval)
	}
}

// noteRead records that the client sent something (trackedConn.Read).
func (cs *connState) noteRead() { cs.lastRead.Store(time.Now().UnixNano()) }
