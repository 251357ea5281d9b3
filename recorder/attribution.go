package recorder

import (
	"strconv"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Attribution: which kernel audit session is this session's. The launcher
// gives the session's login process a loginuid and with it a fresh audit
// session id (`ses`), which every process it spawns inherits and which the
// kernel writes into each of their audit records (docs/AGENT.md, "The agent
// adapter", says what this rests on). The recorder puts it into the chain
// and hands it to the witnesses that select their evidence by it.

// BindAuditSession records ses as the session's kernel audit session id,
// with the PTY slave's name (`audit_tty`, the `tty` the kernel's records
// of the session's terminal processes carry), and then hands ses to every
// witness of the session that is an AuditBinder. Call it once, after the
// launch and before the session's bytes are copied.
func (s *Session) BindAuditSession(ses uint32) error {
	attrs := map[string]string{vocab.AttrAuditSes: strconv.FormatUint(uint64(ses), 10)}
	if s.tty != "" {
		attrs[vocab.AttrAuditTTY] = s.tty
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.appendAuditSession(attrs); err != nil {
		return err
	}
	for _, w := range s.witnesses {
		if b, ok := w.(AuditBinder); ok {
			b.BindAuditSession(ses, s.tty)
		}
	}
	return nil
}

// NoAuditSession records that the session has no kernel audit session of
// its own, and why (`audit_ses_reason`): its processes' audit records cannot
// be told apart from others by `ses`. No witness is bound. An unattributed
// record follows at once, saying so in the chain's own words, so that a
// session run by something other than the real agent (root's program in
// its place, which cannot set the session's loginuid) is never silent.
func (s *Session) NoAuditSession(reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.appendAuditSession(map[string]string{vocab.AttrAuditSesReason: reason}); err != nil {
		return err
	}
	return s.appendUnattributed(vocab.UnattributedNoAuditSession, map[string]string{vocab.AttrAuditSesReason: reason})
}

// appendUnattributed appends an unattributed record with reason (a
// vocab.Unattributed* value) and attrs. Callers hold mu.
func (s *Session) appendUnattributed(reason string, attrs map[string]string) error {
	if err := s.writable(); err != nil {
		return err
	}
	all := map[string]string{vocab.AttrReason: reason}
	for k, v := range attrs {
		all[k] = v
	}
	if err := s.fail(s.chain.Append(vocab.TypeUnattributed, withExactValues(all))); err != nil {
		return err
	}
	return s.dirtied(0)
}

// appendAuditSession appends the audit-session record. Callers hold mu.
func (s *Session) appendAuditSession(attrs map[string]string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.fail(s.chain.Append(vocab.TypeAuditSession, withExactValues(attrs))); err != nil {
		return err
	}
	return s.dirtied(0)
}
