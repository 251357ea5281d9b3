package auditrelay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditnetlink"
	"github.com/aptl/aptl-kali-capture/internal/peercred"
	"github.com/aptl/aptl-kali-capture/internal/ratelog"
	"github.com/aptl/aptl-kali-capture/internal/relaywire"
)

// Bounds of the server.
const (
	// MaxConns bounds the connections served at once: a sidecar holds two
	// (control, records); a node's relay serves a few sidecars.
	MaxConns = 16
	// helloWait bounds the wait for a connection's hello.
	helloWait = 2 * time.Second
	// writeWait bounds each frame's send: a sidecar that stops reading
	// for longer loses its records connection (and states the gap when
	// it reconnects), rather than holding the relay.
	writeWait = 10 * time.Second
	// queueBytes bounds the records read from the kernel and not yet
	// sent, per records connection: the multicast socket is drained at
	// once into it, since without CAP_NET_ADMIN its own buffer is only
	// net.core.rmem_max. Past it datagrams are dropped and counted.
	queueBytes = 16 << 20
	readEvery  = 200 * time.Millisecond
)

// Config configures the server.
type Config struct {
	Socket string // the socket's path, on the volume only the relay and the sidecar mount
	// PeerUID and PeerGID are the sidecar's credentials (SO_PEERCRED);
	// every other peer is closed at once, with no reply.
	PeerUID, PeerGID int
	Log              *slog.Logger
}

// Server is a running relay.
type Server struct {
	cfg      Config
	ln       *net.UnixListener
	refusals *ratelog.Log
	slots    chan struct{}

	mu    sync.Mutex
	conns map[*relaywire.Conn]bool
	wg    sync.WaitGroup

	// openControl and openMulticast reach the kernel; tests replace them.
	openControl   func() (kernelControl, error)
	openMulticast func() (kernelRecords, error)
}

// kernelControl is the kernel's side of a control connection.
type kernelControl interface {
	StatusBytes() ([]byte, error)
	Set(mask, enabled, backlogLimit uint32) error
	AddRule([]byte) error
	DelRule([]byte) error
	ListRules() ([][]byte, error)
	Close() error
}

// kernelRecords is the kernel's side of a records connection.
type kernelRecords interface {
	Read(buf []byte, timeout time.Duration) ([]byte, error)
	Close() error
}

// Listen checks cfg and creates the socket, mode 0600: only the relay's
// uid (which the sidecar shares) may connect. A socket left at the path
// by an earlier relay is replaced; any other file there is refused.
func Listen(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := peercred.CheckIDs(cfg.PeerUID, cfg.PeerGID); err != nil {
		return nil, fmt.Errorf("witness relay: the sidecar's %w", err)
	}
	if fi, err := os.Lstat(cfg.Socket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("witness relay: %s exists and is not a socket; not replaced", cfg.Socket)
		}
		if err := os.Remove(cfg.Socket); err != nil {
			return nil, fmt.Errorf("witness relay: remove the old socket: %w", err)
		}
	}
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("witness relay: listen: %w", err)
	}
	s := &Server{cfg: cfg, ln: ln, slots: make(chan struct{}, MaxConns), conns: map[*relaywire.Conn]bool{},
		refusals:      ratelog.New(cfg.Log, slog.LevelWarn, "relay refusals not logged one by one", 20, time.Second),
		openControl:   func() (kernelControl, error) { return auditnetlink.OpenControl() },
		openMulticast: func() (kernelRecords, error) { return auditnetlink.OpenMulticast() }}
	return s, nil
}

// Serve accepts connections until ctx ends, then closes every connection
// and returns. It never touches the kernel's audit state on its own: the
// rules stay as the sidecar left them.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { s.ln.Close() })
	defer stop()
	defer s.closeAll()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			s.cfg.Log.Warn("witness relay: accept", "err", err.Error())
			time.Sleep(100 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		conn := relaywire.NewConn(c)
		if err := s.admit(conn); err != nil {
			s.refusals.Note("witness relay: connection refused", "reason", err.Error())
			conn.Close()
			continue
		}
		select {
		case s.slots <- struct{}{}:
		default:
			s.refusals.Note("witness relay: connection refused", "reason", fmt.Sprintf("%d connections are served already", MaxConns))
			conn.Close()
			continue
		}
		s.mu.Lock()
		s.conns[conn] = true
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() { <-s.slots }()
			defer s.forget(conn)
			if err := s.serveConn(conn); err != nil && !errors.Is(err, relaywire.ErrClosed) && ctx.Err() == nil {
				s.cfg.Log.Warn("witness relay: connection ended", "err", err.Error())
			}
		})
	}
}

// admit is the peer check, before anything is read or allocated.
func (s *Server) admit(c *relaywire.Conn) error {
	cred, err := c.PeerCred()
	if err != nil {
		return err
	}
	return relaywire.CheckPeer(cred, "the sidecar", s.cfg.PeerUID, s.cfg.PeerGID, "--peer-uid, --peer-gid")
}

func (s *Server) forget(c *relaywire.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

func (s *Server) closeAll() {
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Close stops listening (Serve returns once its connections end).
func (s *Server) Close() error { return s.ln.Close() }

func (s *Server) serveConn(c *relaywire.Conn) error {
	c.Unix().SetReadDeadline(time.Now().Add(helloWait))
	f, err := c.Read(relaywire.TypeHello)
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	role, err := relaywire.ParseHello(f)
	if err != nil {
		return err
	}
	c.Unix().SetReadDeadline(time.Time{})
	switch role {
	case relaywire.RoleControl:
		k, err := s.openControl()
		if err != nil {
			return err
		}
		defer k.Close()
		if err := c.Write(relaywire.Encode(relaywire.TypeWelcome, relaywire.Version), time.Now().Add(writeWait)); err != nil {
			return err
		}
		return serveControl(c, k)
	default:
		k, err := s.openMulticast()
		if err != nil {
			return err
		}
		defer k.Close()
		if err := c.Write(relaywire.Encode(relaywire.TypeWelcome, relaywire.Version), time.Now().Add(writeWait)); err != nil {
			return err
		}
		return serveRecords(c, k)
	}
}

// serveControl answers requests one at a time until the peer closes.
func serveControl(c *relaywire.Conn, k kernelControl) error {
	for {
		f, err := c.Read(relaywire.TypeStatus, relaywire.TypeSet, relaywire.TypeAddRule, relaywire.TypeDelRule, relaywire.TypeListRules)
		if err != nil {
			return err
		}
		replies, kerr := answer(f, k)
		deadline := time.Now().Add(writeWait)
		for _, r := range replies {
			if err := c.Write(r, deadline); err != nil {
				return err
			}
		}
		if err := c.Write(done(kerr), deadline); err != nil {
			return err
		}
	}
}

// answer does one request; the kernel's bytes go both ways unread.
func answer(f relaywire.Frame, k kernelControl) ([][]byte, error) {
	switch f.Type {
	case relaywire.TypeStatus:
		b, err := k.StatusBytes()
		if err != nil {
			return nil, err
		}
		r, err := relaywire.EncodeBytes(relaywire.TypeStatusReply, b)
		return [][]byte{r}, err
	case relaywire.TypeSet:
		return nil, k.Set(f.U32(0), f.U32(1), f.U32(2))
	case relaywire.TypeAddRule:
		return nil, k.AddRule(f.Body)
	case relaywire.TypeDelRule:
		return nil, k.DelRule(f.Body)
	default: // TypeListRules
		rules, err := k.ListRules()
		if err != nil {
			return nil, err
		}
		out := make([][]byte, 0, len(rules))
		for _, b := range rules {
			r, err := relaywire.EncodeBytes(relaywire.TypeRule, b)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// done is the done frame of a request's outcome: the kernel's refusal
// (auditnetlink returns the NLMSG_ERROR's errno bare) as its errno, and
// anything else, the relay's own failure (a reply timeout, a send that
// failed, a malformed reply: wrapped, even when an errno is inside), as a
// message, so the engine never takes a local EINVAL for the kernel's.
func done(err error) []byte {
	if err == nil {
		return relaywire.Done(0, "")
	}
	if errno, ok := err.(syscall.Errno); ok {
		return relaywire.Done(uint32(errno), "")
	}
	return relaywire.Done(0, err.Error())
}
