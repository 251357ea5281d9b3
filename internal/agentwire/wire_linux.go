// Package agentwire is the wire protocol between the sidecar's "agent" adapter
// (launch/agentclient, the client) and aptl-launch-agent in the workload
// (agentd, the server); docs/AGENT.md, "The agent adapter", describes the
// deployment. Every message either side sends or accepts is in this package;
// who may connect is decided by the peer checks (the sidecar's checkPeer in
// launch/agentclient/agentpeer_linux.go, the agent's admit in
// agentd/agentadmit_linux.go).
//
//	sidecar (Agent)                                   aptl-launch-agent (agentd.Server)
//	connect SOCK_SEQPACKET|SOCK_CLOEXEC ────────────▶ accept; admit (agentd/agentadmit_linux.go):
//	checkPeer: agent uid, other PID namespace,          SO_PEERCRED uid and gid must be the
//	                                                   sidecar's and pid 0 (outside the agent's
//	                                                   PID namespace); any other peer is
//	                                                   closed at once, with no reply
//	spawn {mode user term command env}
//	  + SCM_RIGHTS [slave] | [stdin stdout stderr] ─▶ check fds, env names (a fixed set,
//	                                                   agentenv_linux.go), allow-list, passwd;
//	close its own copies of the fds                    setsid, TIOCSCTTY, setgroups,
//	                                                   setgid, setuid, execve
//	                                                   (through the login trampoline, which
//	                                                   first writes the loginuid: a fresh ses)
//	                           ◀──────────────────── started {user uid gid home shell note ses audit_note
//	                                                           instance}
//	                           ◀──────────────────── or error {code message}, then close
//	signal {name}  (any number) ────────────────────▶ kill(-pgid, sig)
//	shutdown(SHUT_WR) = hang up ────────────────────▶ SIGHUP to the group, SIGKILL
//	(a crashed sidecar's close is the same)            after HangupGrace unless reaped
//	                           ◀──────────────────── exit {code signal core}, then close
//
//	probe (instead of spawn)   ────────────────────▶ nothing is started
//	                           ◀──────────────────── probe-ok {instance}, then close
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
//	started  str user, u32 uid, u32 gid, str home, str shell, str note,
//	         u32 audit ses (0 = none), str audit note (why none),
//	         instance
//	exit     u32 code, u32 signal (0 = exited), u32 core dumped (0/1)
//	error    str code (one of the Code* values), str message (no argv, env or paths of the request)
//	probe-ok instance
//	probe:   empty body
//	instance str id (32 lowercase hex digits, random, made once at the agent's start),
//	         u32 pid (the agent's, in its own PID namespace), str started (RFC 3339, UTC)
//
// The instance tells one run of the agent from the next: the sidecar logs
// every instance it has not seen answer before (a start or a restart of the
// agent, docs/AGENT.md, "The agent adapter"). It is the agent's word like
// everything it reports: a program of root's own in its place may claim any.
//
// Compatibility: the started body's audit fields and instance, and the
// probe-ok body, were added within version 1. The sidecar accepts a
// started body that ends after the note (an older agent: the session has
// no audit session, and the record says so) or after the audit note, and
// an empty probe-ok (no instance: logged as unknown); an older sidecar
// refuses a newer agent's bodies (bytes after the last field, or a
// probe-ok with a body), so upgrade the sidecar first. The audit ses is
// the agent's word: the sidecar cannot read the workload's /proc
// (docs/AGENT.md, "The agent adapter", says what the attribution rests on).
//
// The agent never receives paths, recorder settings, or requests to chmod,
// delete or Truncate anything: there is no message that could carry one.
// Receivers use MSG_CMSG_CLOEXEC (net.UnixConn.ReadMsgUnix always sets it on
// Linux). Every wait has a deadline (connect, each write, the reply to spawn
// or probe, the first request, the exit after a hang-up, LingerClose) except
// the waits for the next signal and for the exit, which last as long as the
// session and end with it. A side that ends the connection after its last
// frame shuts its write side and drains first (LingerClose).
package agentwire

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

// Version is the protocol version. Both sides refuse any other.
const Version = 1

// Type is a frame's type. Requests flow sidecar → agent, replies agent → sidecar.
type Type uint8

const (
	TypeSpawn  Type = 1 // request; 1 fd (pty) or 3 fds (pipes)
	TypeSignal Type = 2 // request
	TypeProbe  Type = 3 // request

	TypeStarted Type = 17 // reply to spawn
	TypeExit    Type = 18 // after started, once
	TypeError   Type = 19 // reply to anything; the connection then closes
	TypeProbeOK Type = 20 // reply to probe
)

func (t Type) String() string {
	switch t {
	case TypeSpawn:
		return "spawn"
	case TypeSignal:
		return "signal"
	case TypeProbe:
		return "probe"
	case TypeStarted:
		return "started"
	case TypeExit:
		return "exit"
	case TypeError:
		return "error"
	case TypeProbeOK:
		return "probe-ok"
	}
	return fmt.Sprintf("unknown(%d)", uint8(t))
}

// Mode of a spawn request.
const (
	SpawnPTY   = 1
	SpawnPipes = 2
)

// Size bounds. MaxRequestFrame holds the broker's largest exec command (64
// KiB) and its default env (64 entries of at most 1 KiB) and stays below the
// default socket send buffer (net.Core.wmem_default, 208 KiB), which bounds
// one SOCK_SEQPACKET record. Replies are small.
const (
	HeaderLen        = 8
	MaxRequestFrame  = 192 << 10
	MaxReplyFrame    = 16 << 10
	MaxFDs           = 3
	maxNameField     = 256      // user, term, signal and error code
	maxCommandField  = 64 << 10 // as the broker's exec limit
	maxEnvEntries    = 256
	maxEnvEntryField = 8 << 10
	MaxTextField     = 4 << 10 // home, shell, note, error message
)

// Error codes of an error reply. The sidecar logs the code; the client of
// the SSH session only ever sees the broker's fixed message.
const (
	CodeProtocol   = "protocol" // malformed frame, wrong version, type or fds
	CodeNotAllowed = "user-not-allowed"
	CodeEnv        = "env-not-allowed" // an env name outside the agent's fixed set (agentenv_linux.go)
	CodeNoUser     = "user-unknown"
	CodeStart      = "start-failed"
	CodeBusy       = "busy"           // session limit reached, or shutting down before the start
	CodeShutdown   = "agent-shutdown" // instead of the exit: the agent hung the session up to stop
	CodeWait       = "wait-failed"    // instead of the exit: the agent lost its child
)

// Error is a protocol violation or an error reply; its text names the
// frame and the rule it broke, never a field's value.
type Error struct {
	Code string
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func Protocolf(format string, args ...any) error {
	return &Error{Code: CodeProtocol, Msg: "launch wire: " + fmt.Sprintf(format, args...)}
}

// Frame is one received frame. The receiver owns files and must close them.
type Frame struct {
	Type  Type
	Body  []byte
	Files []*os.File
}

func (f *Frame) CloseFiles() {
	for _, file := range f.Files {
		file.Close()
	}
	f.Files = nil
}

// ErrPeerClosed is a clean end of the connection (EOF, or an empty record).
var ErrPeerClosed = errors.New("launch wire: peer closed the connection")

// ReadFrame reads one frame of at most maxLen bytes and asserts that its type
// is one of want. Every fd that arrived with a frame that fails any check is
// closed here; on success the caller owns f.Files, whose number matches the
// header. The caller bounds the wait with c's read deadline: ReadFrame leaves
// it alone, so that another goroutine may shorten it (Hangup does).
func ReadFrame(c *net.UnixConn, maxLen int, want ...Type) (f Frame, err error) {
	buf := make([]byte, maxLen)
	// Room for one fd more than any frame may carry, so that an extra fd is
	// seen (and closed) rather than silently dropped by the kernel.
	oob := make([]byte, unix.CmsgSpace((MaxFDs+1)*4))
	n, oobn, flags, _, rerr := c.ReadMsgUnix(buf, oob)
	n, oobn = clamp(n, len(buf)), clamp(oobn, len(oob)) // a failed recvmsg may return -1
	f.Files, err = parseRights(oob[:oobn])
	defer func() {
		if err != nil {
			f.CloseFiles()
		}
	}()
	switch {
	case errors.Is(rerr, io.EOF) || (rerr == nil && n == 0 && oobn == 0):
		return f, ErrPeerClosed
	case rerr != nil:
		return f, fmt.Errorf("launch wire: read: %w", rerr)
	case err != nil:
		return f, err
	case flags&unix.MSG_TRUNC != 0:
		return f, Protocolf("frame larger than %d bytes", maxLen)
	case flags&unix.MSG_CTRUNC != 0 || len(f.Files) > MaxFDs:
		// The control buffer has room for one fd more than a frame may
		// carry, so that one extra arrives (and is closed here); more set
		// MSG_CTRUNC, and the kernel closes those.
		return f, Protocolf("frame carries more than %d fds", MaxFDs)
	case n < HeaderLen:
		return f, Protocolf("truncated frame: %d bytes, header needs %d", n, HeaderLen)
	}
	hdr := buf[:HeaderLen]
	if v := binary.BigEndian.Uint16(hdr[0:2]); v != Version {
		return f, Protocolf("frame version %d, this side speaks %d", v, Version)
	}
	f.Type = Type(hdr[2])
	if l := binary.BigEndian.Uint32(hdr[4:8]); uint64(l) != uint64(n-HeaderLen) {
		return f, Protocolf("truncated %s frame: header says %d body bytes, got %d", f.Type, l, n-HeaderLen)
	}
	if nfds := int(hdr[3]); nfds != len(f.Files) {
		return f, Protocolf("%s frame declares %d fds, %d arrived", f.Type, nfds, len(f.Files))
	}
	if !typeIn(f.Type, want) {
		return f, Protocolf("unexpected %s frame, want %v", f.Type, want)
	}
	f.Body = buf[HeaderLen:n]
	return f, nil
}

func clamp(n, limit int) int {
	return min(max(n, 0), limit)
}

func typeIn(t Type, set []Type) bool {
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
		return nil, Protocolf("control data: %v", err)
	}
	var files []*os.File
	var bad error
	rights := 0
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = Protocolf("unexpected control message %d/%d", m.Header.Level, m.Header.Type)
			continue
		}
		// unix.ParseUnixRights indexes past its result (a panic) when the
		// data is not whole 4-byte fds; the kernel never writes such a
		// message, but take the whole fds, so they get closed, and refuse.
		if whole := len(m.Data) &^ 3; whole != len(m.Data) {
			bad = Protocolf("SCM_RIGHTS of %d bytes, not whole fds", len(m.Data))
			m.Data = m.Data[:whole]
		}
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = Protocolf("SCM_RIGHTS: %v", err)
			continue
		}
		rights++
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "received-fd"))
		}
	}
	if bad == nil && rights > 1 {
		bad = Protocolf("%d SCM_RIGHTS messages, want one", rights)
	}
	return files, bad
}

// LingerClose ends a connection after a final reply: it shuts down the write
// side, then reads and discards (closing any fds) until the peer closes or
// LingerTimeout passes. Closing a Unix socket with unread data makes the
// peer's next read fail with ECONNRESET (unix_release_sock) instead of
// returning the reply that is already in its queue.
func LingerClose(c *net.UnixConn) {
	defer c.Close()
	if c.CloseWrite() != nil || c.SetReadDeadline(time.Now().Add(LingerTimeout)) != nil {
		return
	}
	for {
		f, err := ReadFrame(c, MaxRequestFrame, TypeSpawn, TypeSignal, TypeProbe)
		f.CloseFiles()
		var we *Error
		if err != nil && !errors.As(err, &we) {
			return // EOF, deadline, or the connection failed
		}
	}
}

// LingerTimeout bounds LingerClose.
const LingerTimeout = time.Second

// WriteFrame sends one frame with files attached before deadline. It checks
// the size against maxLen first, so an oversized request fails with a clear
// error instead of EMSGSIZE. The caller keeps ownership of files.
func WriteFrame(c *net.UnixConn, maxLen int, deadline time.Time, typ Type, body []byte, files ...*os.File) error {
	if len(files) > MaxFDs {
		return fmt.Errorf("launch wire: %s frame with %d fds, at most %d", typ, len(files), MaxFDs)
	}
	if HeaderLen+len(body) > maxLen {
		return fmt.Errorf("launch wire: %s frame of %d bytes exceeds %d", typ, HeaderLen+len(body), maxLen)
	}
	buf := AppendHeader(make([]byte, 0, HeaderLen+len(body)), Version, typ, uint8(len(files)), uint32(len(body)))
	buf = append(buf, body...)
	if err := c.SetWriteDeadline(deadline); err != nil {
		return fmt.Errorf("launch wire: set deadline: %w", err)
	}
	if err := SendRecord(c, buf, files...); err != nil {
		return fmt.Errorf("launch wire: send %s: %w", typ, err)
	}
	return nil
}

// AppendHeader appends a frame header to b. WriteFrame passes the true
// values; tests pass false ones to see how a receiver refuses them.
func AppendHeader(b []byte, version uint16, typ Type, nfds uint8, bodyLen uint32) []byte {
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, byte(typ), nfds)
	return binary.BigEndian.AppendUint32(b, bodyLen)
}

// SendRecord sends record as one SOCK_SEQPACKET record with files attached
// as one SCM_RIGHTS message. It is the protocol's only sendmsg: WriteFrame
// uses it, and so do tests that send malformed records. The caller keeps
// ownership of files.
func SendRecord(c *net.UnixConn, record []byte, files ...*os.File) error {
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
	n, oobn, err := c.WriteMsgUnix(record, oob, nil)
	runtime.KeepAlive(files) // the fds must stay open until sendmsg took its references
	if err != nil {
		return err
	}
	if n != len(record) || oobn != len(oob) {
		return errors.New("short write")
	}
	return nil
}

// Message bodies.

type SpawnMsg struct {
	Mode    uint32
	User    string
	Term    string
	Command string
	Env     []string
}

type StartedMsg struct {
	User        string
	UID, GID    uint32
	Home, Shell string
	Note        string
	// AuditSes is the kernel audit session id the agent gave the session
	// (0: none); AuditNote says why there is none. AuditReported says the
	// body has these fields: an agent older than them sends neither.
	AuditSes      uint32
	AuditNote     string
	AuditReported bool
	// Instance is the agent's (Instance.ID "" when the body has none: an
	// agent older than it). Encode writes it only after the audit fields.
	Instance Instance
}

// Instance identifies one run of the agent: ID is random, made once at its
// start; PID is its pid in its own PID namespace; Started its start time.
type Instance struct {
	ID      string
	PID     uint32
	Started time.Time
}

// InstanceIDLen is the length of an instance id: 16 random bytes in hex.
const InstanceIDLen = 32

// Reported says whether the body carried an instance.
func (in Instance) Reported() bool { return in.ID != "" }

func (e *Encoder) instance(in Instance) {
	e.Str(in.ID)
	e.U32(in.PID)
	e.Str(in.Started.UTC().Format(time.RFC3339Nano))
}

// instance decodes an instance and checks its form: an id of InstanceIDLen
// lowercase hex digits, a pid, an RFC 3339 time.
func (d *Decoder) instance() Instance {
	in := Instance{ID: d.Str(maxNameField), PID: d.U32()}
	started := d.Str(maxNameField)
	if d.err != nil {
		return Instance{}
	}
	t, err := time.Parse(time.RFC3339Nano, started)
	switch {
	case !isInstanceID(in.ID):
		d.fail("instance id is not %d lowercase hex digits", InstanceIDLen)
	case in.PID == 0:
		d.fail("instance pid 0")
	case err != nil || t.UTC().Format(time.RFC3339Nano) != started:
		// One encoding per time: UTC, as the agent writes it.
		d.fail("instance start time is not RFC 3339 in UTC")
	}
	in.Started = t.UTC()
	return in
}

func isInstanceID(s string) bool {
	if len(s) != InstanceIDLen {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// EncodeProbeOK is a probe-ok body.
func EncodeProbeOK(in Instance) []byte {
	e := NewEncoder(nil)
	e.instance(in)
	return e.Bytes()
}

// DecodeProbeOK accepts a probe-ok body with an instance, or an empty one
// (an older agent: Instance.ID "").
func DecodeProbeOK(b []byte) (Instance, error) {
	if len(b) == 0 {
		return Instance{}, nil
	}
	d := NewDecoder(b, "probe-ok frame")
	return decoded(d.instance(), d)
}

type ExitMsg struct {
	Code, Signal, Core uint32
}

type ErrorMsg struct {
	Code, Message string
}

func (m SpawnMsg) Encode() []byte {
	e := NewEncoder(nil)
	e.U32(m.Mode)
	e.Str(m.User)
	e.Str(m.Term)
	e.Str(m.Command)
	e.U32(uint32(len(m.Env)))
	for _, kv := range m.Env {
		e.Str(kv)
	}
	return e.Bytes()
}

func DecodeSpawn(b []byte) (SpawnMsg, error) {
	d := NewDecoder(b, "spawn frame")
	m := SpawnMsg{Mode: d.U32(), User: d.Str(maxNameField), Term: d.Str(maxNameField), Command: d.Str(maxCommandField)}
	n := d.U32()
	if n > maxEnvEntries {
		return SpawnMsg{}, Protocolf("spawn frame: %d env entries, at most %d", n, maxEnvEntries)
	}
	for i := uint32(0); i < n && d.err == nil; i++ {
		m.Env = append(m.Env, d.Str(maxEnvEntryField))
	}
	return decoded(m, d)
}

func (m StartedMsg) Encode() []byte {
	e := NewEncoder(nil)
	e.Str(m.User)
	e.U32(m.UID)
	e.U32(m.GID)
	e.Str(m.Home)
	e.Str(m.Shell)
	e.Str(m.Note)
	if m.AuditReported { // an older agent's body ends with the note
		e.U32(m.AuditSes)
		e.Str(m.AuditNote)
		if m.Instance.Reported() {
			e.instance(m.Instance)
		}
	}
	return e.Bytes()
}

// DecodeStarted accepts a started body with the audit fields and the
// instance, with the audit fields only, or without either (older agents:
// Instance.ID "", AuditReported false).
func DecodeStarted(b []byte) (StartedMsg, error) {
	d := NewDecoder(b, "started frame")
	m := StartedMsg{User: d.Str(maxNameField), UID: d.U32(), GID: d.U32(),
		Home: d.Str(MaxTextField), Shell: d.Str(MaxTextField), Note: d.Str(MaxTextField)}
	if d.err == nil && len(d.b) != 0 {
		m.AuditSes, m.AuditNote, m.AuditReported = d.U32(), d.Str(MaxTextField), true
	}
	if d.err == nil && len(d.b) != 0 {
		m.Instance = d.instance()
	}
	return decoded(m, d)
}

func (m ExitMsg) Encode() []byte {
	e := NewEncoder(nil)
	e.U32(m.Code)
	e.U32(m.Signal)
	e.U32(m.Core)
	return e.Bytes()
}

func DecodeExit(b []byte) (ExitMsg, error) {
	d := NewDecoder(b, "exit frame")
	m := ExitMsg{Code: d.U32(), Signal: d.U32(), Core: d.U32()}
	return decoded(m, d)
}

func (m ErrorMsg) Encode() []byte {
	e := NewEncoder(nil)
	e.Str(m.Code)
	e.Str(Truncate(m.Message, MaxTextField))
	return e.Bytes()
}

func DecodeError(b []byte) (ErrorMsg, error) {
	d := NewDecoder(b, "error frame")
	m := ErrorMsg{Code: d.Str(maxNameField), Message: d.Str(MaxTextField)}
	return decoded(m, d)
}

func EncodeSignal(name string) []byte {
	e := NewEncoder(nil)
	e.Str(name)
	return e.Bytes()
}

func DecodeSignal(b []byte) (string, error) {
	d := NewDecoder(b, "signal frame")
	return decoded(d.Str(maxNameField), d)
}

func Truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// decoded returns m when d read a whole, valid body, and the zero value
// otherwise: a receiver never holds fields of a body it refused.
func decoded[M any](m M, d *Decoder) (M, error) {
	if err := d.End(); err != nil {
		var zero M
		return zero, Protocolf("%v", err)
	}
	return m, nil
}
