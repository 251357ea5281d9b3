package broker

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// The policy in this file is pure: functions over request data and Config,
// with no I/O, so that every decision is table-tested (policy_test.go).

// Environment names the lab's tool servers send with every session
// (docs/RECORD.md, "Provenance headers"): they become the record's identity, so they are validated
// with the canonical id rule rather than passed through as free text.
const (
	envSessionID = vocab.HeaderSessionID
	envRunID     = vocab.HeaderRunID
	envTraceID   = vocab.HeaderTraceID
)

// defaultRunID is where sessions go that name no run (docs/RECORD.md, "What a
// session leaves").
const defaultRunID = "_unbound"

// Bounds on what a client may put into a session's environment.
const (
	maxEnvNameLen  = 64
	maxEnvValueLen = 1024
)

// sessionIDs is the identity a session is recorded under. The request loop
// fills it from env requests; it is immutable once the session starts.
type sessionIDs struct {
	run, session, trace string
	// sessionInvalid is set when the client supplied an APTL_SESSION_ID that
	// failed the id rule; the value itself is never kept.
	sessionInvalid bool
	// runRefused holds why a supplied APTL_RUN_ID cannot be used. A session
	// whose run id was refused is refused too, rather than recorded silently
	// under another run.
	runRefused error
	// lateID is set, for good, when an id arrived after the env request
	// limit: it was not applied, so the session is refused rather than
	// recorded under an id the client did not ask for.
	lateID error
}

// refusal returns why the session may not start under these ids, or nil.
func (ids sessionIDs) refusal() error {
	if ids.lateID != nil {
		return ids.lateID
	}
	return ids.runRefused
}

// isIDEnv reports whether name is one of the env names that carry the
// session's identity.
func isIDEnv(name string) bool {
	return name == envSessionID || name == envRunID || name == envTraceID
}

// refuseEnvOverLimit is the decision for an env request past the limit of
// limit requests: refused, and when it carries an id, the session with it.
func refuseEnvOverLimit(name string, limit int, ids *sessionIDs) error {
	err := fmt.Errorf("more than %d env requests", limit)
	if isIDEnv(name) && ids.lateID == nil {
		ids.lateID = fmt.Errorf("%s was sent after the limit of %d env requests; session refused", name, limit)
	}
	return err
}

var (
	errEnvName     = errors.New("environment name is not acceptable")
	errEnvValue    = errors.New("environment value is too long or has control characters")
	errEnvNotAllow = errors.New("environment name is not on the accept list")
	errInvalidID   = errors.New("value is not a valid id")
)

// envDecision is what the broker does with one env request: pass
// NAME=value to the process when err is nil.
type envDecision struct {
	err  error  // why it was refused; nil when accepted
	name string // the name, safe to log only when accepted or a known name
}

// decideEnv applies the env accept policy to one request and, for the APTL_*
// ids, updates ids. Everything not explicitly accepted is refused.
func decideEnv(name, value string, acceptList []string, ids *sessionIDs) envDecision {
	if !validEnvName(name) {
		return envDecision{err: errEnvName}
	}
	switch name {
	case envSessionID:
		if !recorder.ValidID(value) {
			// The latest APTL_SESSION_ID request wins, valid or not.
			ids.session, ids.sessionInvalid = "", true
			return envDecision{name: name, err: fmt.Errorf("%s: %w", name, errInvalidID)}
		}
		ids.session, ids.sessionInvalid = value, false
		return envDecision{name: name}
	case envRunID:
		switch {
		case !recorder.ValidID(value):
			ids.runRefused = fmt.Errorf("%s: %w", name, errInvalidID)
		case recorder.ReservedRunID(value):
			ids.runRefused = fmt.Errorf("%s %q is a reserved name", name, value)
		default:
			ids.run, ids.runRefused = value, nil
			return envDecision{name: name}
		}
		return envDecision{name: name, err: ids.runRefused}
	case envTraceID:
		if !recorder.ValidID(value) {
			return envDecision{name: name, err: fmt.Errorf("%s: %w", name, errInvalidID)}
		}
		ids.trace = value
		return envDecision{name: name}
	}
	if !mayAcceptEnv(name, acceptList) {
		return envDecision{name: name, err: errEnvNotAllow}
	}
	if !validEnvValue(value) {
		return envDecision{name: name, err: errEnvValue}
	}
	return envDecision{name: name}
}

// DefaultAcceptEnv is the locale and time zone set that OpenSSH's default
// sshd_config also accepts (AcceptEnv LANG LC_*), plus TZ.
var DefaultAcceptEnv = []string{"LANG", "LC_*", "TZ"}

// mayAcceptEnv reports whether name matches an accept-list entry: either the
// exact name or a prefix ending in '*'.
func mayAcceptEnv(name string, acceptList []string) bool {
	for _, pattern := range acceptList {
		if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == pattern {
			return true
		}
	}
	return false
}

// ValidEnvPattern reports whether p may appear in the accept list: an
// environment name, optionally ending in '*'. The APTL_* ids are always
// handled by their own rules and need not be listed.
func ValidEnvPattern(p string) bool {
	name, _ := strings.CutSuffix(p, "*")
	return name != "" && validEnvName(name)
}

func validEnvName(name string) bool {
	if name == "" || len(name) > maxEnvNameLen {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

func validEnvValue(v string) bool {
	if len(v) > maxEnvValueLen {
		return false
	}
	for _, c := range []byte(v) {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// Window bounds. The kernel stores rows and columns as uint16; anything past
// these is a client bug or an attempt to make full-screen programs allocate
// absurd buffers.
const (
	maxWindowDim = 10000
	maxPixelDim  = 65535
	defaultCols  = 80
	defaultRows  = 24
)

var errWindowSize = errors.New("window size out of range")

// checkWindow validates a requested size. A zero size in a pty-req means
// "unspecified" (RFC 4254 §6.2 lets clients send pixels only) and becomes
// the classic 80x24; in a window-change it is refused.
func checkWindow(w window, zeroMeansDefault bool) (window, error) {
	if w.cols == 0 && w.rows == 0 && zeroMeansDefault {
		w.cols, w.rows = defaultCols, defaultRows
	}
	if w.cols < 1 || w.cols > maxWindowDim || w.rows < 1 || w.rows > maxWindowDim ||
		w.width > maxPixelDim || w.height > maxPixelDim {
		return w, fmt.Errorf("%w: %dx%d", errWindowSize, w.cols, w.rows)
	}
	return w, nil
}

// logSafe returns s when it is a valid id (so it cannot carry secrets,
// control characters or unbounded text into the log) and a fixed marker
// otherwise.
func logSafe(s string) string {
	if recorder.ValidID(s) && len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("<invalid len=%d>", len(s))
}
