// Package auditrelay is the witness relay: the small privileged program
// that holds the kernel's audit netlink where the kernel requires it (the
// initial PID namespace for rules and status, the initial network
// namespace for the records' multicast group), in a container of its own
// with CAP_AUDIT_CONTROL and CAP_AUDIT_READ and nothing else, and serves it
// to the capture sidecar over a Unix socket on a volume that only the two
// mount (docs/WITNESSES.md, "The witness relay").
//
// The server (server_linux.go, `aptl-kali-capture witness-relay`) forwards
// requests and records and parses nothing it does not have to: rules pass
// as the kernel's bytes, records as the kernel's datagrams. Everything the
// witness does with them (rules from the lab's file, grouping, attribution
// by ses, the session's files, the kernel watch) stays in the sidecar's
// engine (witness/audit), which reaches the relay through the client
// (client_linux.go). The protocol is internal/relaywire's.
package auditrelay
