package launch

// The wire protocol between the sidecar's "agent" adapter (agent_linux.go, the
// client) and aptl-launch-agent in the workload (agentserver_linux.go, the
// server). DESIGN.md §3.5. Every message either side sends or accepts is in
// this file; who may connect is decided by the peer checks (the sidecar's
// checkPeer in agentpeer_linux.go, the agent's in agentserver_linux.go).
//
//	sidecar (Agent)                                   aptl-launch-agent (AgentServer)
//	connect SOCK_SEQPACKET|SOCK_CLOEXEC ────────────▶ accept; admit (agentadmit_linux.go):
//	checkPeer: agent uid, other PID namespace,          SO_PEERCRED uid and gid must be the
//	                                                   sidecar's and pid 0 (outside the agent's
//	                                                   PID namespace); any other peer is
//	                                                   closed at once, with no reply
//	spawn {mode user term command env}
//	  + SCM_RIGHTS [slave] | [stdin stdout stderr] ─▶ check fds, env names (a fixed set,
//	                                                   agentenv_linux.go), allow-list, passwd;
//	close its own copies of the fds                    setsid, TIOCSCTTY, setgroups,
//	                                                   setgid, setuid, execve
//	                           ◀──────────────────── started {user uid gid home shell note}
//	                           ◀──────────────────── or error {code message}, then close
//	signal {name}  (any number) ────────────────────▶ kill(-pgid, sig)
//	shutdown(SHUT_WR) = hang up ────────────────────▶ SIGHUP to the group, SIGKILL
//	(a crashed sidecar's close is the same)            after hangupGrace unless reaped
//	                           ◀──────────────────── exit {code signal core}, then close
//
//	probe (instead of spawn)   ────────────────────▶ nothing is started
//	                           ◀──────────────────── probe-ok, then close
//
// A frame is one SOCK_SEQPACKET record, so frames are never split or merged:
//
//	0         2      3      4              8
//	+---------+------+------+--------------+----------------------+
//	| version | type | nfds | body length  | body (length bytes)  |
//	| u16 BE  | u8   | u8   | u32 BE       |                      |
//	+---------+------+------+--------------+----------------------+
//
// nfds is the number of fds the sender attached as one SCM_RIGHTS control
// message; a receiver that gets a different number closes every fd it got and
// fails. A body is a fixed sequence of fields per type, each a u32 BE or a
// byte string (u32 BE length, then the bytes); nothing may follow the last
// field. Strings are bytes, not JSON: a command or env value that is not UTF-8
// reaches the shell exactly as the client sent it.
//
//	spawn    u32 mode (1 pty, 2 pipes), str user, str term, str command ("" = login shell),
//	         u32 n, n × str "KEY=VALUE"
//	signal   str name (RFC 4254 §6.10, without "SIG": INT, TERM, ...)
//	started  str user, u32 uid, u32 gid, str home, str shell, str note
//	exit     u32 code, u32 signal (0 = exited), u32 core dumped (0/1)
//	error    str code (one of the errCode* values), str message (no argv, env or paths of the request)
//	probe, probe-ok: empty bodies
//
// The agent never receives paths, recorder settings, or requests to chmod,
// delete or truncate anything: there is no message that could carry one.
// Receivers use MSG_CMSG_CLOEXEC (net.UnixConn.ReadMsgUnix always sets it on
// Linux). Every wait has a deadline (connect, each write, the reply to spawn
// or probe, the first request, the exit after a hang-up, lingerClose) except
// the waits for the next signal and for the exit, which last as long as the
// session and end with it. A side that ends the connection after its last
// frame shuts its write side and drains first (lingerClose).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// wireVersion is the protocol version. Both sides refuse any other.
const wireVersion = 1

// msgType is a frame's type. Requests flow sidecar → agent, replies agent → sidecar.
type msgType uint8

const (
	msgSpawn  msgType = 1 // request; 1 fd (pty) or 3 fds (pipes)
	msgSignal msgType = 2 // request
	msgProbe  msgType = 3 // request

	msgStarted msgType = 17 // reply to spawn
	msgExit    msgType = 18 // after started, once
	msgError   msgType = 19 // reply to anything; the connection then closes
	msgProbeOK msgType = 20 // reply to probe
)

func (t msgType) String() string {
	switch t {
	case msgSpawn:
		return "spawn"
	case msgSignal:
		return "signal"
	case msgProbe:
		return "probe"
	case msgStarted:
		return "started"
	case msgExit:
		return "exit"
	case msgError:
		return "error"
	case msgProbeOK:
		return "probe-ok"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Mode of a spawn request.
const (
	spawnPTY   = 1
	spawnPipes = 2
)

// Size bounds. maxRequestFrame holds the broker's largest exec command (64
// KiB) and its default env (64 entries of at most 1 KiB) and stays below the
// default socket send buffer (net.core.wmem_default, 208 KiB), which bounds
// one SOCK_SEQPACKET record. Replies are small.
const (
	frameHeaderLen   = 8
	maxRequestFrame  = 192 << 10
	maxReplyFrame    = 16 << 10
	maxFramesFDs     = 3
	maxNameField     = 256      // user, term, signal and error code
	maxCommandField  = 64 << 10 // as the broker's exec limit
	maxEnvEntries    = 256
	maxEnvEntryField = 8 << 10
	maxTextField     = 4 << 10 // home, shell, note, error message
)

// Error codes of an error reply. The sidecar logs the code; the client of
// the SSH session only ever sees the broker's fixed message.
const (
	errCodeProtocol   = "protocol" // malformed frame, wrong version, type or fds
	errCodeNotAllowed = "user-not-allowed"
	errCodeEnv        = "env-not-allowed" // an env name outside the agent's fixed set (agentenv_linux.go)
	errCodeNoUser     = "user-unknown"
	errCodeStart      = "start-failed"
	errCodeBusy       = "busy"           // session limit reached, or shutting down before the start
	errCodeShutdown   = "agent-shutdown" // instead of the exit: the agent hung the session up to stop
	errCodeWait       = "wait-failed"    // instead of the exit: the agent lost its child
)

// wireError is a protocol violation or an error reply; its text names the
// frame and the rule it broke, never a field's value.
type wireError struct {
	code string
	msg  string
}

func (e *wireError) Error() string { return e.msg }

func protoErrorf(format string, args ...any) error {
	return &wireError{code: errCodeProtocol, msg: "launch wire: " + fmt.Sprintf(format, args...)}
}

// frame is one received frame. The receiver owns files and must close them.
type frame struct {
	typ   msgType
	body  []byte
	files []*os.File
}

func (f *frame) closeFiles() {
	for _, file := range f.files {
		file.Close()
	}
	f.files = nil
}

// errPeerClosed is a clean end of the connection (EOF, or an empty record).
var errPeerClosed = errors.New("launch wire: peer closed the connection")

// readFrame reads one frame of at most maxLen bytes and asserts that its type
// is one of want. Every fd that arrived with a frame that fails any check is
// closed here; on success the caller owns f.files, whose number matches the
// header. The caller bounds the wait with c's read deadline: readFrame leaves
// it alone, so that another goroutine may shorten it (Hangup does).
func readFrame(c *net.UnixConn, maxLen int, want ...msgType) (f frame, err error) {
	buf := make([]byte, maxLen)
	// Room for one fd more than any frame may carry, so that an extra fd is
	// seen (and closed) rather than silently dropped by the kernel.
	oob := make([]byte, unix.CmsgSpace((maxFramesFDs+1)*4))
	n, oobn, flags, _, rerr := c.ReadMsgUnix(buf, oob)
	n, oobn = clamp(n, len(buf)), clamp(oobn, len(oob)) // a failed recvmsg may return -1
	f.files, err = parseRights(oob[:oobn])
	defer func() {
		if err != nil {
			f.closeFiles()
		}
	}()
	switch {
	case errors.Is(rerr, io.EOF) || (rerr == nil && n == 0 && oobn == 0):
		return f, errPeerClosed
	case rerr != nil:
		return f, fmt.Errorf("launch wire: read: %w", rerr)
	case err != nil:
		return f, err
	case flags&unix.MSG_TRUNC != 0:
		return f, protoErrorf("frame larger than %d bytes", maxLen)
	case flags&unix.MSG_CTRUNC != 0:
		return f, protoErrorf("frame carries more than %d fds", maxFramesFDs)
	case n < frameHeaderLen:
		return f, protoErrorf("truncated frame: %d bytes, header needs %d", n, frameHeaderLen)
	}
	hdr := buf[:frameHeaderLen]
	if v := binary.BigEndian.Uint16(hdr[0:2]); v != wireVersion {
		return f, protoErrorf("frame version %d, this side speaks %d", v, wireVersion)
	}
	f.typ = msgType(hdr[2])
	if l := binary.BigEndian.Uint32(hdr[4:8]); uint64(l) != uint64(n-frameHeaderLen) {
		return f, protoErrorf("truncated %s frame: header says %d body bytes, got %d", f.typ, l, n-frameHeaderLen)
	}
	if nfds := int(hdr[3]); nfds != len(f.files) {
		return f, protoErrorf("%s frame declares %d fds, %d arrived", f.typ, nfds, len(f.files))
	}
	if !typeIn(f.typ, want) {
		return f, protoErrorf("unexpected %s frame, want %v", f.typ, want)
	}
	f.body = buf[frameHeaderLen:n]
	return f, nil
}

func clamp(n, limit int) int {
	return min(max(n, 0), limit)
}

func typeIn(t msgType, set []msgType) bool {
	for _, s := range set {
		if t == s {
			return true
		}
	}
	return false
}

// parseRights returns every fd in the control data as an *os.File, so that
// all of them are closed if anything is wrong. More than one SCM_RIGHTS
// message, or any other kind of control message, is an error.
func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, protoErrorf("control data: %v", err)
	}
	var files []*os.File
	var bad error
	rights := 0
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = protoErrorf("unexpected control message %d/%d", m.Header.Level, m.Header.Type)
			continue
		}
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = protoErrorf("SCM_RIGHTS: %v", err)
			continue
		}
		rights++
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "received-fd"))
		}
	}
	if bad == nil && rights > 1 {
		bad = protoErrorf("%d SCM_RIGHTS messages, want one", rights)
	}
	return files, bad
}

// lingerClose ends a connection after a final reply: it shuts down the write
// side, then reads and discards (closing any fds) until the peer closes or
// lingerTimeout passes. Closing a Unix socket with unread data makes the
// peer's next read fail with ECONNRESET (unix_release_sock) instead of
// returning the reply that is already in its queue.
func lingerClose(c *net.UnixConn) {
	defer c.Close()
	if c.CloseWrite() != nil || c.SetReadDeadline(time.Now().Add(lingerTimeout)) != nil {
		return
	}
	for {
		f, err := readFrame(c, maxRequestFrame, msgSpawn, msgSignal, msgProbe)
		f.closeFiles()
		var we *wireError
		if err != nil && !errors.As(err, &we) {
			return // EOF, deadline, or the connection failed
		}
	}
}

// lingerTimeout bounds lingerClose.
const lingerTimeout = time.Second

// writeFrame sends one frame with files attached before deadline. It checks
// the size against maxLen first, so an oversized request fails with a clear
// error instead of EMSGSIZE. The caller keeps ownership of files.
func writeFrame(c *net.UnixConn, maxLen int, deadline time.Time, typ msgType, body []byte, files ...*os.File) error {
	if len(files) > maxFramesFDs {
		return fmt.Errorf("launch wire: %s frame with %d fds, at most %d", typ, len(files), maxFramesFDs)
	}
	if frameHeaderLen+len(body) > maxLen {
		return fmt.Errorf("launch wire: %s frame of %d bytes exceeds %d", typ, frameHeaderLen+len(body), maxLen)
	}
	buf := make([]byte, frameHeaderLen, frameHeaderLen+len(body))
	binary.BigEndian.PutUint16(buf[0:2], wireVersion)
	buf[2] = byte(typ)
	buf[3] = byte(len(files))
	binary.BigEndian.PutUint32(buf[4:8], uint32(len(body)))
	buf = append(buf, body...)
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			// Fd() puts the open file description in blocking mode, which the
			// receiver's child needs: O_NONBLOCK is shared with every process
			// holding the fd (fcntl(2)), and a shell reading a non-blocking
			// stdin would get EAGAIN. The ends are only handed on here.
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if err := c.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("launch wire: set deadline: %w", err)
	}
	n, oobn, err := c.WriteMsgUnix(buf, oob, nil)
	runtime.KeepAlive(files) // the fds must stay open until sendmsg took its references
	if err != nil {
		return fmt.Errorf("launch wire: send %s: %w", typ, err)
	}
	if n != len(buf) || oobn != len(oob) {
		return fmt.Errorf("launch wire: send %s: short write", typ)
	}
	return nil
}

// Message bodies.

type spawnMsg struct {
	mode    uint32
	user    string
	term    string
	command string
	env     []string
}

type startedMsg struct {
	user        string
	uid, gid    uint32
	home, shell string
	note        string
}

type exitMsg struct {
	code, signal, core uint32
}

type errorMsg struct {
	code, message string
}

func (m spawnMsg) encode() []byte {
	var e encoder
	e.u32(m.mode)
	e.str(m.user)
	e.str(m.term)
	e.str(m.command)
	e.u32(uint32(len(m.env)))
	for _, kv := range m.env {
		e.str(kv)
	}
	return e.b
}

func decodeSpawn(b []byte) (spawnMsg, error) {
	d := decoder{b: b, what: "spawn"}
	m := spawnMsg{mode: d.u32(), user: d.str(maxNameField), term: d.str(maxNameField), command: d.str(maxCommandField)}
	n := d.u32()
	if n > maxEnvEntries {
		return m, protoErrorf("spawn frame: %d env entries, at most %d", n, maxEnvEntries)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		m.env = append(m.env, d.str(maxEnvEntryField))
	}
	return m, d.end()
}

func (m startedMsg) encode() []byte {
	var e encoder
	e.str(m.user)
	e.u32(m.uid)
	e.u32(m.gid)
	e.str(m.home)
	e.str(m.shell)
	e.str(m.note)
	return e.b
}

func decodeStarted(b []byte) (startedMsg, error) {
	d := decoder{b: b, what: "started"}
	m := startedMsg{user: d.str(maxNameField), uid: d.u32(), gid: d.u32(),
		home: d.str(maxTextField), shell: d.str(maxTextField), note: d.str(maxTextField)}
	return m, d.end()
}

func (m exitMsg) encode() []byte {
	var e encoder
	e.u32(m.code)
	e.u32(m.signal)
	e.u32(m.core)
	return e.b
}

func decodeExit(b []byte) (exitMsg, error) {
	d := decoder{b: b, what: "exit"}
	m := exitMsg{code: d.u32(), signal: d.u32(), core: d.u32()}
	return m, d.end()
}

func (m errorMsg) encode() []byte {
	var e encoder
	e.str(m.code)
	e.str(truncate(m.message, maxTextField))
	return e.b
}

func decodeError(b []byte) (errorMsg, error) {
	d := decoder{b: b, what: "error"}
	m := errorMsg{code: d.str(maxNameField), message: d.str(maxTextField)}
	return m, d.end()
}

func encodeSignal(name string) []byte {
	var e encoder
	e.str(name)
	return e.b
}

func decodeSignal(b []byte) (string, error) {
	d := decoder{b: b, what: "signal"}
	name := d.str(maxNameField)
	return name, d.end()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

type encoder struct{ b []byte }

func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }

func (e *encoder) str(s string) {
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// decoder reads fields in order; the first error sticks and later reads
// return zero values, so a message is decoded in one expression and checked once.
type decoder struct {
	b    []byte
	what string
	err  error
}

func (d *decoder) u32() uint32 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 4 {
		d.err = protoErrorf("%s frame: body ends inside a field", d.what)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) str(max int) string {
	n := d.u32()
	if d.err != nil {
		return ""
	}
	if n > uint32(max) {
		d.err = protoErrorf("%s frame: a field of %d bytes, at most %d", d.what, n, max)
		return ""
	}
	if uint32(len(d.b)) < n {
		d.err = protoErrorf("%s frame: body ends inside a field", d.what)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *decoder) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = protoErrorf("%s frame: %d bytes after the last field", d.what, len(d.b))
	}
	return d.err
}
