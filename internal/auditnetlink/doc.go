// Package auditnetlink is the kernel's audit netlink (NETLINK_AUDIT), the
// parts the audit witness uses and nothing more: the status (AUDIT_GET),
// the enabled flag and backlog limit (AUDIT_SET with only those mask bits,
// never AUDIT_STATUS_PID, which would make the caller the audit daemon and
// displace a host auditd), rules as the kernel's own bytes (AUDIT_ADD_RULE,
// AUDIT_DEL_RULE, AUDIT_LIST_RULES), and the records of the read-only
// multicast group (AUDIT_NLGRP_READLOG).
//
// Rules pass through as bytes: this package never builds or reads a rule
// (witness/audit does), so the witness relay (witness/auditrelay), which
// runs with CAP_AUDIT_CONTROL, links a netlink that parses only the
// kernel's status and its message headers. Every wait is bounded
// (ReplyTimeout) and every reply is bounded in size and count.
//
// The kernel takes status and rule messages only from the initial PID
// namespace, and multicasts records only in the initial network namespace
// (docs/ARCHITECTURE.md): a caller elsewhere gets EPERM or no records.
package auditnetlink
