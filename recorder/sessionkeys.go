package recorder

import (
	"errors"
	"fmt"
	"strconv"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// KeySource gives sessions their own signing keys: *sessionkey.Pool.
type KeySource interface {
	// Take gives a new session its key (sessionkey.ErrPoolEmpty when
	// none is left).
	Take() (*sessionkey.Key, error)
	// Resume gives a cut session's recovery the key it was signed with.
	Resume(serial uint64) (*sessionkey.Key, error)
}

// ErrNoSessionKey is matched (errors.Is) by Create's error when the
// session would have no key of its own and the host key may not stand in
// (Options.HostKeyFallback).
var ErrNoSessionKey = errors.New("recorder: no session key")

// sessionSigner is what signs a new session: its own key from the pool,
// or the host key, where no pool is set, or where the pool gave none and
// the fallback is allowed (then the reason, vocab.Fallback*, for the open
// record, and the pool's error for the log).
func sessionSigner(opts Options) (signer gossh.Signer, key *sessionkey.Key, fallback string, why error, err error) {
	if opts.SessionKeys == nil {
		return opts.Signer, nil, "", nil, nil
	}
	key, err = opts.SessionKeys.Take()
	if err == nil {
		return key, key, "", nil, nil
	}
	if !opts.HostKeyFallback {
		return nil, nil, "", nil, fmt.Errorf("%w: %w", ErrNoSessionKey, err)
	}
	fallback = vocab.FallbackPoolFailed
	if errors.Is(err, sessionkey.ErrPoolEmpty) {
		fallback = vocab.FallbackPoolEmpty
	}
	return opts.Signer, nil, fallback, err, nil
}

// KeyFallback says why the host key signs a session that was to have a
// key of its own (the pool's error), or nil.
func (s *Session) KeyFallback() error { return s.keyFallback }

// destroyKey destroys the session's own key, if it has one: the session
// was never created. Callers own s alone.
func (s *Session) destroyKey() error { return s.sealKey(true) }

// sealKey ends the session's own key's signer, if it has one, and
// destroys the key where the session is sealed; otherwise the key file
// stays for the recovery (sessionkey.Key.Release). Callers hold mu or own
// s alone.
func (s *Session) sealKey(sealed bool) error {
	if s.key == nil {
		return nil
	}
	k := s.key
	s.key = nil
	if sealed {
		return k.Destroy()
	}
	return k.Release()
}

// recoverySigner is what signs the recovery statement of a session a
// crash cut: its own key, left in the pool's active keys, where the open
// record names one and it is there (then key, which the recovery
// destroys once the manifest is written); the host key otherwise, and
// the reason for the recovery record (vocab.FallbackKeyGone) and the
// error for the log.
func recoverySigner(rep *evidence.Report, opts Options) (signer gossh.Signer, key *sessionkey.Key, fallback string, why error) {
	if rep.Signer != vocab.SignerSessionKey {
		return opts.Signer, nil, "", nil
	}
	serial, err := strconv.ParseUint(rep.SignerSerial, 10, 64)
	switch {
	case err != nil:
		why = fmt.Errorf("the open record's %s %.32q is not a serial", vocab.AttrSignerSerial, rep.SignerSerial)
	case opts.SessionKeys == nil:
		why = errors.New("serve runs without session keys")
	default:
		if key, why = opts.SessionKeys.Resume(serial); why == nil {
			return key, key, "", nil
		}
	}
	return opts.Signer, nil, vocab.FallbackKeyGone, why
}
