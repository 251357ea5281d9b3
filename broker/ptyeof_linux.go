package broker

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// PTYEOFChar (session.go) answers a client's EOF on a PTY shell as a
// person at the terminal ends it: with the terminal's EOF character.
//
// When the character is written matters more than that it is. The line
// discipline interprets input when it arrives, under the termios of that
// moment, not when it is read. `printf 'cmd\n...' | ssh -tt host` sends
// every command and its EOF before the shell has even started; a ^D
// written then arrives in canonical mode, where n_tty turns it into an
// end-of-line mark that reads as a NUL byte once bash's line editor has
// switched the terminal to non-canonical mode for its prompt, and the
// shell never exits (bash took it for C-@, set-mark, in the experiment
// that found this). So the character waits until the terminal has read
// everything the client sent and its reader waits for more:
//
//   - nothing typed ahead is left unread (TIOCINQ on the slave), and
//   - either the terminal is in non-canonical mode (ICANON off): a line
//     editor (bash's readline, zsh's ZLE, a REPL) reads keys one by one
//     and takes VEOF on an empty line as the end, as it does when a
//     person presses Ctrl-D; a full-screen or raw program gets the byte,
//     as from a person, and the fallback below ends what ignores it;
//   - or the terminal is in canonical mode, held by the shell itself (no
//     job in the foreground: the foreground process group is the session
//     leader's), and has stayed so for eofCanonSettle: a shell without a
//     line editor (dash) reads there, while bash passes through canonical
//     mode only briefly between two commands. A foreground job (a command
//     typed ahead, still running under job control) is waited for: its
//     end brings the prompt back.
//
// Whether or not the character could be written, a session that has not
// ended within Config.PTYEOFWait of the client's EOF is hung up as
// PTYEOFHangup does, with close reason client-eof-timeout: a program that
// ignores ^D, a shell with ignoreeof, a command typed ahead that runs
// longer, a terminal without an EOF character (VEOF disabled).
//
// The character is the sidecar's, not the client's: it goes to the
// master without passing through the recorder's input stream, so the
// typescript and the timing file hold exactly the bytes the client sent.
// The pty-eof record in the chain (vocab.TypePTYEOF) says what was
// written, when, and in which mode, before it is written.

const (
	// eofPoll is how often the terminal is asked whether its reader
	// waits; at a prompt the first look already finds it so.
	eofPoll = 5 * time.Millisecond
	// eofCanonSettle is how long a canonical terminal held by the shell
	// must stay so before the character is written (see above).
	eofCanonSettle = 50 * time.Millisecond
	// eofCloseGrace: a client that closes the channel ends its input as an
	// EOF does (x/crypto wakes the channel's reader first), and the
	// request loop, woken by the same close a moment later, stops the
	// session as client-closed. Waiting this long before the first look
	// keeps the character (and, from a raw-mode program, its echo, output
	// the client would never get) out of a session that is closing.
	eofCloseGrace = 10 * time.Millisecond
)

// termState is what the terminal says of its reader at one look.
type termState struct {
	unread int  // input bytes the reader has not read (whole lines, in canonical mode)
	icanon bool // canonical mode
	// shellHolds: the foreground process group is the session leader's,
	// so no job runs in the foreground. Both read 0 from a PID namespace
	// that does not see the session (the agent adapter's workload), which
	// counts as the shell's: the canonical settle still applies.
	shellHolds bool
	veof       byte // the EOF character; 0 (_POSIX_VDISABLE): none
}

// typeEOF is PTYEOFChar's answer to the client's EOF, run by the input
// copier after it wrote every byte the client sent before it. It returns
// when the session ended, or once it hung the session up.
func (r *run) typeEOF() {
	eofAt := time.Now()
	bound := r.ss.srv.cfg.PTYEOFWait
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	poll := time.NewTicker(eofPoll)
	defer poll.Stop()
	var canonSince time.Time // when the shell was first seen reading in canonical mode
	var probeErr error       // the last look's failure, for the record
	// acted: the pty-eof record is written (and the character, if the
	// terminal has one); what is left is to wait for the end.
	acted := false
	select {
	case <-r.done:
		return
	case <-r.ss.ctx.Done():
		return
	case <-time.After(eofCloseGrace):
	}
	for {
		if !acted {
			st, err := r.master.terminalState()
			switch {
			case err != nil:
				// The slave's last holder is leaving (the shell exiting)
				// or the master was closed: the session is ending, which
				// the select below sees. Any other failure leaves the
				// fallback to end it. Logged once, not every look.
				if probeErr == nil {
					r.log.Debug("client EOF: terminal state unreadable", "err", err.Error())
				}
			case st.unread > 0 || (st.icanon && !st.shellHolds):
				canonSince = time.Time{}
			case st.icanon && canonSince.IsZero():
				canonSince = time.Now()
			case !st.icanon || time.Since(canonSince) >= eofCanonSettle:
				if !r.writeEOF(st, time.Since(eofAt), bound) {
					return
				}
				acted = true
				// Nothing more to look at: no wake-ups while waiting.
				poll.Stop()
			}
			probeErr = err
		}
		select {
		case <-r.done:
			return
		case <-r.ss.ctx.Done():
			return
		case <-deadline.C:
			if !acted {
				r.recordEOFNotWritten(probeErr, bound)
			}
			r.log.Info("client EOF: session still running after the wait; hanging up", "wait", bound.String(), "terminal_was_reading", acted)
			r.ss.stop(errEOFTimeout)
			return
		case <-poll.C:
		}
	}
}

// writeEOF records the pty-eof record, then writes the terminal's EOF
// character to the master. It reports whether typeEOF should go on
// waiting for the session's end (false: the session is ending anyway).
// A terminal without an EOF character gets the record and no byte.
func (r *run) writeEOF(st termState, waited, bound time.Duration) bool {
	attrs := map[string]string{
		vocab.AttrICanon: strconv.FormatBool(st.icanon),
		vocab.AttrWaited: waited.String(),
		vocab.AttrWithin: bound.String(),
	}
	if st.veof == 0 {
		attrs[vocab.AttrReason] = vocab.EOFNotDisabled
	} else {
		attrs[vocab.AttrEOFChar] = fmt.Sprintf("%02x", st.veof)
	}
	if err := r.rec.Event(vocab.TypePTYEOF, attrs); err != nil {
		if !errors.Is(err, recorder.ErrClosed) {
			r.ss.stop(ioCause(err))
		}
		return false
	}
	if st.veof == 0 {
		return true
	}
	// The reader waits with nothing unread, so the queue has room: this
	// write does not wait, and a Close ends it if it did.
	if _, err := r.master.Write([]byte{st.veof}); err != nil {
		return false
	}
	r.log.Debug("client EOF: wrote the terminal's EOF character", "waited", waited.String(), "icanon", st.icanon)
	return true
}

// recordEOFNotWritten states, before the fallback's hang-up, that the
// terminal never waited for input within the bound.
func (r *run) recordEOFNotWritten(probeErr error, bound time.Duration) {
	attrs := map[string]string{vocab.AttrReason: vocab.EOFNotTerminalBusy, vocab.AttrWithin: bound.String()}
	if probeErr != nil {
		attrs[vocab.AttrError] = probeErr.Error()
	}
	if err := r.rec.Event(vocab.TypePTYEOF, attrs); err != nil && !errors.Is(err, recorder.ErrClosed) {
		r.ss.stop(ioCause(err))
	}
}

// terminalState looks at the terminal behind the master. The ioctls run
// in a RawConn callback, which holds the master's descriptor (see
// ptyMaster).
func (m *ptyMaster) terminalState() (termState, error) {
	var st termState
	var opErr error
	rc, _ := m.SyscallConn()
	if err := rc.Control(func(fd uintptr) { opErr = readTermState(int(fd), &st) }); err != nil {
		return st, err
	}
	return st, opErr
}

// readTermState fills st from a PTY master. On a master, Linux answers
// TCGETS, TIOCGPGRP and TIOCGSID for the slave (tty_mode_ioctl and
// tiocgpgrp take the pair's other end), but TIOCINQ for the master's own
// queue: the slave's comes from a descriptor of the slave that
// TIOCGPTPEER opens for the one question. It is never held: while the
// sidecar holds a slave open, the master's reads cannot see the shell's
// exit (EIO once no slave is open), which the output drain waits for.
func readTermState(master int, st *termState) error {
	t, err := unix.IoctlGetTermios(master, unix.TCGETS)
	if err != nil {
		return os.NewSyscallError("tcgets", err)
	}
	st.icanon, st.veof = t.Lflag&unix.ICANON != 0, t.Cc[unix.VEOF]
	pgrp, err := unix.IoctlGetInt(master, unix.TIOCGPGRP)
	if err != nil {
		return os.NewSyscallError("tiocgpgrp", err)
	}
	// A terminal that is no session's controlling terminal has neither a
	// session (ENOTTY) nor a foreground group (0): nobody's job control.
	sid, err := unix.IoctlGetInt(master, unix.TIOCGSID)
	if err == unix.ENOTTY {
		sid, err = 0, nil
	}
	if err != nil {
		return os.NewSyscallError("tiocgsid", err)
	}
	st.shellHolds = pgrp == sid
	peer, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(master), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return os.NewSyscallError("tiocgptpeer", errno)
	}
	defer unix.Close(int(peer))
	if st.unread, err = unix.IoctlGetInt(int(peer), unix.TIOCINQ); err != nil {
		return os.NewSyscallError("tiocinq", err)
	}
	return nil
}
