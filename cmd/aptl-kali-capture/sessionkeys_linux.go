package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// The --session-keys settings.
const (
	sessionKeysHost       = "host-key"
	sessionKeysPool       = "pool"
	sessionKeysPoolOrHost = "pool-or-host-key"
)

// openSessionKeys opens the session key pool on the state volume when the
// setting asks for one; nil with host-key. Its signer children are this
// executable's session-signer subcommand. A key the pool sets aside is
// logged with its serial and why (never a key's bytes).
func openSessionKeys(cfg *serveConfig, log *slog.Logger) (*sessionkey.Pool, error) {
	if cfg.sessionKeys == sessionKeysHost {
		return nil, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("session keys: this program's path, for the signer: %w", err)
	}
	pool, err := sessionkey.Open(cfg.stateDir, sessionkey.SignerCommand{Path: exe, Args: []string{sessionSignerCommand}})
	if err != nil {
		return nil, fmt.Errorf("session keys: %w", err)
	}
	pool.OnRefuse = func(serial uint64, reason string) {
		log.Warn("session key set aside, not used", "serial", serial, "reason", reason, "moved_to", sessionkey.RefusedDir)
	}
	n, err := pool.Available()
	switch {
	case err != nil:
		log.Error("session key pool unreadable", "err", err.Error())
	case n == 0 && cfg.sessionKeys == sessionKeysPool:
		log.Error("session key pool is empty: every session is refused until keys are provisioned (keys provision)", "pool", sessionkey.Dir+"/"+sessionkey.PoolDir)
	case n == 0:
		log.Warn("session key pool is empty: sessions are signed by the host key, and their open records say so", "pool", sessionkey.Dir+"/"+sessionkey.PoolDir)
	default:
		log.Info("session key pool", "keys", n)
	}
	return pool, nil
}

// sessionKeyState is readiness's session_keys line: off (the host key
// signs), ok (keys left), empty (none: sessions refused, or signed by the
// host key where allowed), or unreadable; and how many are left.
func sessionKeyState(pool *sessionkey.Pool) string {
	if pool == nil {
		return "session_keys=off\n"
	}
	n, err := pool.Available()
	state := "ok"
	switch {
	case err != nil:
		state = "unreadable"
	case n == 0:
		state = "empty"
	}
	return fmt.Sprintf("session_keys=%s\nsession_keys_left=%d\n", state, n)
}
