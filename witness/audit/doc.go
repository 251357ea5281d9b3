// Package audit is the sidecar's audit witness: it loads the lab's rules
// (auditctl syntax, rules.go) into the kernel over the audit netlink, reads
// the kernel's records through the read-only multicast group (never
// registering as the audit daemon, so a host auditd is never displaced),
// groups them into events by serial (events.go), and writes the events of
// the lab's audit sessions, and only those, in auditd's own log format:
// <root>/_audit/audit.log for the lab's harvest, and per session
// <session>/audit/audit-NNNNNN.log bound into the session's integrity chain
// through the recorder's witness hook (recorder/witness.go). Process
// lifetimes derived from the exec and exit records go to <root>/_proc-acct/
// (procacct.go), because acct(2) in the sidecar's PID namespace cannot see
// the workload's processes.
//
// Attribution: the launch agent sets each session process's loginuid before
// exec, which gives it and everything it spawns a fresh kernel audit
// session id (ses); the broker hands that ses to the session's witness
// (recorder.AuditBinder). The ses is agent-reported; the records are the
// kernel's.
//
// Gaps: records the kernel lost, and windows in which someone else turned
// auditing off or removed the witness's rules (kernelwatch_linux.go: the
// engine restores them and states each window), are gap records of every
// open session and lines of <root>/_audit/gaps.log.
//
// The netlink side (netlink_linux.go, engine_linux.go) is Linux-only; the
// rules parser and the record format are plain Go and tested everywhere.
package audit
