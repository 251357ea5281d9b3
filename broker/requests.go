package broker

import (
	"errors"
	"fmt"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/launch"
)

// Payloads of the RFC 4254 session channel requests the broker serves. Each
// parse function bounds what it accepts beyond what x/crypto/ssh already
// bounds (a packet is at most 256 KiB).

// maxCommandLen bounds an exec command. Tool servers send one delimiter-wrapped
// command line; 64 KiB is far above that and well below the packet limit.
const maxCommandLen = 64 << 10

// maxModesLen bounds the encoded terminal modes of a pty-req: RFC 4254 §8
// defines fewer than 60 opcodes of 5 bytes each.
const maxModesLen = 1024

// window is a terminal size as sent in pty-req and window-change.
type window struct {
	cols, rows, width, height uint32
}

// ptyRequest is a parsed pty-req (RFC 4254 §6.2).
type ptyRequest struct {
	term  string
	win   window
	modes []byte
}

var errMalformed = errors.New("malformed request payload")

func parsePtyReq(payload []byte) (ptyRequest, error) {
	var msg struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}
	if err := gossh.Unmarshal(payload, &msg); err != nil {
		return ptyRequest{}, fmt.Errorf("pty-req: %w", errMalformed)
	}
	if !launch.ValidTerm(msg.Term) {
		return ptyRequest{}, errors.New("pty-req: terminal name is not acceptable")
	}
	if len(msg.Modes) > maxModesLen {
		return ptyRequest{}, errors.New("pty-req: terminal modes too long")
	}
	win, err := checkWindow(window{msg.Cols, msg.Rows, msg.Width, msg.Height}, true)
	if err != nil {
		return ptyRequest{}, fmt.Errorf("pty-req: %w", err)
	}
	return ptyRequest{term: msg.Term, win: win, modes: []byte(msg.Modes)}, nil
}

func parseWindowChange(payload []byte) (window, error) {
	var msg struct{ Cols, Rows, Width, Height uint32 }
	if err := gossh.Unmarshal(payload, &msg); err != nil {
		return window{}, fmt.Errorf("window-change: %w", errMalformed)
	}
	return checkWindow(window{msg.Cols, msg.Rows, msg.Width, msg.Height}, false)
}

func parseEnv(payload []byte) (name, value string, err error) {
	var msg struct{ Name, Value string }
	if err := gossh.Unmarshal(payload, &msg); err != nil {
		return "", "", fmt.Errorf("env: %w", errMalformed)
	}
	return msg.Name, msg.Value, nil
}

func parseExec(payload []byte) (string, error) {
	var msg struct{ Command string }
	if err := gossh.Unmarshal(payload, &msg); err != nil {
		return "", fmt.Errorf("exec: %w", errMalformed)
	}
	if msg.Command == "" {
		return "", errors.New("exec: empty command")
	}
	if len(msg.Command) > maxCommandLen {
		return "", fmt.Errorf("exec: command longer than %d bytes", maxCommandLen)
	}
	for _, c := range []byte(msg.Command) {
		if c == 0 {
			return "", errors.New("exec: command contains a NUL byte")
		}
	}
	return msg.Command, nil
}

// parseNamed reads the single-string payload of "signal" and "subsystem".
func parseNamed(reqType string, payload []byte) (string, error) {
	var msg struct{ Name string }
	if err := gossh.Unmarshal(payload, &msg); err != nil {
		return "", fmt.Errorf("%s: %w", reqType, errMalformed)
	}
	return msg.Name, nil
}

// exitStatusMsg and exitSignalMsg are RFC 4254 §6.10.
type exitStatusMsg struct{ Status uint32 }

type exitSignalMsg struct {
	Signal     string
	CoreDumped bool
	Message    string
	Lang       string
}
