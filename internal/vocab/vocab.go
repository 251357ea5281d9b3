// Package vocab is the record's vocabulary: the names that the writer (the
// broker and the recorder) puts into a capture folder and that the examiner
// reads back. Every name lives here once, so writer and reader cannot drift
// apart; vocab_test.go checks that README.md documents exactly these.
package vocab

import "strings"

// Files of a session folder: <session>/pty/{typescript,timing,...}.
const (
	PTYDir         = "pty"
	TypescriptFile = "typescript"
	TimingFile     = "timing"
	LogFile        = "integrity.jsonl"
	RecoveryFile   = "recovery.jsonl"
)

// The session's signed manifest, in the session folder beside pty/: every
// file of the session with its SHA-256 in sha256sum's format (package
// internal/sha256sums), and its SSHSIG signature, written once the
// session is sealed (closed, or recovered at a start), so that
// `sha256sum -c` and `ssh-keygen -Y verify` check a harvested folder with
// no tool of the project. The close or recovery record announces it
// (AttrManifest).
const (
	ManifestFile    = "SHA256SUMS"
	ManifestSigFile = "SHA256SUMS.sig"
	// AttrManifest, on the close and the recovery record, names the
	// manifest the sidecar writes once that record is signed.
	AttrManifest = "manifest"
	// ManifestMaxFiles bounds the files a manifest lists, which the
	// recorder writes and the verifier reads back: the record files, the
	// recovery file, and a session's witness files, which their own
	// limits bound far below it.
	ManifestMaxFiles = 1 << 16
)

// SidecarDir is the sidecar's own folder in the capture root (a reserved
// run id): it holds the sessions' reserves of space for their closing
// records (recorder/reserve.go), never a session; the examiner's listing
// skips it.
const SidecarDir = "_sidecar"

// Format names the integrity log's record format; the open record carries it.
const Format = "aptl-integrity/1"

// Record types of the integrity log (docs/RECORD.md, "Integrity log and
// verification").
const (
	TypeOpen          = "open"
	TypeData          = "data"
	TypeRequest       = "request"
	TypeResize        = "resize"
	TypeAnnotate      = "annotate"
	TypeEventsDropped = "events-dropped"
	TypeGap           = "gap"
	TypeCheckpoint    = "checkpoint"
	TypeClose         = "close"
	// TypeRecovery is the record a restarted sidecar writes to
	// recovery.jsonl for a session it did not close.
	TypeRecovery = "recovery"
	// TypePTYEOF is the control event of a client's EOF on a PTY shell
	// with --pty-eof eof: the terminal's EOF character the sidecar wrote
	// to the master in its place (AttrEOFChar, AttrICanon, AttrWaited,
	// AttrWithin), or why it wrote none (AttrReason, one of EOFNot*).
	// The character is not client input: no data record or timing line
	// counts it.
	TypePTYEOF = "pty-eof"
	// TypeShipped is the acknowledgement of one segment of a session file
	// that the object store took (package ship): AttrFile, AttrShipPart,
	// AttrShipOffset, AttrShipLength, AttrSHA256, AttrShipETag.
	TypeShipped = "shipped"
)

// Attributes of the shipped record (AttrFile and AttrSHA256 too): the
// segment's number among its file's (from 1), where it starts in the
// file, its length, and the store's entity tag of the object it became.
const (
	AttrShipPart   = "part"
	AttrShipOffset = "offset"
	AttrShipLength = "length"
	AttrShipETag   = "etag"
)

// Attributes and reasons of the pty-eof record.
const (
	AttrEOFChar = "eof_char" // the byte written, two hex digits (VEOF, normally 04)
	AttrICanon  = "icanon"   // whether the terminal was in canonical mode then
	AttrWaited  = "waited"   // from the client's EOF to the write (a Go duration)
	// EOFNotTerminalBusy: within the bound the terminal never waited
	// for input with nothing typed ahead unread (a command still ran).
	EOFNotTerminalBusy = "terminal-busy"
	// EOFNotDisabled: the terminal has no EOF character (VEOF disabled).
	EOFNotDisabled = "veof-disabled"
)

// EOFNotReasons lists every reason of a pty-eof record, in docs/RECORD.md's order.
var EOFNotReasons = []string{EOFNotTerminalBusy, EOFNotDisabled}

// TypePcapFile is listed with the packet witness's names below, and
// TypeAuditSession with the audit attribution's.

// RecordTypes lists every record type, in docs/RECORD.md's order.
var RecordTypes = []string{
	TypeOpen, TypeData, TypeRequest, TypeResize, TypeAnnotate,
	TypeEventsDropped, TypePTYEOF, TypeGap, TypeCheckpoint, TypeClose, TypeRecovery,
	TypePcapFile, TypeAuditFile, TypeAuditSession, TypeUnattributed, TypeDisk,
	TypeShipped,
}

// Streams of data records: what the client sent, what the session printed
// on its terminal or stdout, and stderr of a session without a PTY.
const (
	StreamIn  = "i"
	StreamOut = "o"
	StreamErr = "e"
)

// Attribute names of records that the writer and the examiner share.
const (
	AttrRunID      = "run_id"
	AttrSessionID  = "session_id"
	AttrFormat     = "format"
	AttrHeaderLen  = "ts_header_len"
	AttrHeaderSum  = "ts_header_sha256"
	AttrTSSize     = "ts_size"
	AttrTSSHA256   = "ts_sha256"
	AttrTMSize     = "tm_size"
	AttrTMSHA256   = "tm_sha256"
	AttrExitCode   = "exit_code"
	AttrCloseBytes = "bytes_" // + stream: every byte counted, stored or not
	// AttrCommand is the open record's exec command; "" for a shell.
	AttrCommand = "command"

	AttrReason   = "reason"
	AttrError    = "error" // a gap record's error: the write that failed, the restore that was refused
	AttrCount    = "count"
	AttrRows     = "rows"
	AttrCols     = "cols"
	AttrRequest  = "request" // also a count by kind in events-dropped
	AttrAccepted = "accepted"
	AttrSignal   = "signal" // a count by kind in events-dropped
	AttrResize   = "resize" // a count by kind in events-dropped
)

// Reasons of gap records.
const (
	GapSizeLimit         = "size-limit"          // counted and digested, not stored
	GapWriteFailed       = "write-failed"        // the typescript write failed
	GapTimingWriteFailed = "timing-write-failed" // stored, but its timing entry failed
)

// ReasonControlLimit is an events-dropped record's reason for control
// events past the recorder's bound.
const ReasonControlLimit = "control-event-limit"

// Close reasons: the value of HeaderCloseReason.
const (
	CloseShellExited  = "shell-exited"
	CloseClientClosed = "client-closed"
	// CloseClientEOF: the client's EOF on a PTY session hung the shell up
	// (--pty-eof hangup).
	CloseClientEOF = "client-eof"
	// CloseEOFTimeout: with --pty-eof eof the session had not ended
	// within --pty-eof-wait of the client's EOF (a program that ignores
	// the EOF character, or one still running), so it was hung up as
	// hangup does.
	CloseEOFTimeout      = "client-eof-timeout"
	CloseSidecarShutdown = "sidecar-shutdown"
	CloseLauncherLost    = "launcher-lost"
	CloseIOError         = "io-error"
	// CloseDiskFull: the recording failed because the capture volume
	// was full (ENOSPC, EDQUOT); the record was closed on the space its
	// session had reserved (recorder/reserve.go).
	CloseDiskFull = "disk-full"
	// CloseLaunchFailed: the launcher could not start the process.
	CloseLaunchFailed = "launch-failed"
)

// CloseReasons lists every close reason, in docs/RECORD.md's order.
var CloseReasons = []string{
	CloseShellExited, CloseClientClosed, CloseClientEOF, CloseEOFTimeout, CloseSidecarShutdown,
	CloseLauncherLost, CloseIOError, CloseLaunchFailed, CloseDiskFull,
}

// Provenance headers: the sidecar's own H lines in the timing file, beside
// script(1)'s (docs/RECORD.md, "Provenance headers"). The open and close records
// carry them as attributes of the same names.
const (
	HeaderRunID             = "APTL_RUN_ID"
	HeaderSessionID         = "APTL_SESSION_ID"
	HeaderTraceID           = "APTL_TRACE_ID"
	HeaderSessionIDSupplied = "APTL_SESSION_ID_SUPPLIED"
	HeaderLoginUser         = "APTL_LOGIN_USER"
	HeaderClientKey         = "APTL_CLIENT_KEY"
	HeaderClientAddr        = "APTL_CLIENT_ADDR"
	HeaderConn              = "APTL_CONN"
	HeaderHostKey           = "APTL_HOST_KEY"
	HeaderAdapter           = "APTL_ADAPTER"
	HeaderRunAs             = "APTL_RUN_AS"
	HeaderRunAsUID          = "APTL_RUN_AS_UID"
	HeaderRunAsShell        = "APTL_RUN_AS_SHELL"
	HeaderRunAsNote         = "APTL_RUN_AS_NOTE"
	HeaderRunAsSource       = "APTL_RUN_AS_SOURCE"
	HeaderCloseReason       = "APTL_CLOSE_REASON"
	HeaderExitSignal        = "APTL_EXIT_SIGNAL"
	HeaderNotice            = "APTL_NOTICE"
	HeaderBytesDelivered    = "APTL_BYTES_DELIVERED"
	HeaderBytesDeliveredErr = "APTL_BYTES_DELIVERED_STDERR"
	HeaderSizeLimit         = "APTL_SIZE_LIMIT"
)

// SuppliedInvalid is HeaderSessionIDSupplied's value when the client's
// session id was replaced.
const SuppliedInvalid = "invalid"

// Headers lists every provenance header, in docs/RECORD.md's order.
var Headers = []string{
	HeaderRunID, HeaderSessionID, HeaderTraceID, HeaderSessionIDSupplied,
	HeaderLoginUser, HeaderClientKey, HeaderClientAddr, HeaderConn,
	HeaderHostKey, HeaderAdapter,
	HeaderRunAs, HeaderRunAsUID, HeaderRunAsShell, HeaderRunAsNote, HeaderRunAsSource,
	HeaderCloseReason, HeaderExitSignal, HeaderNotice,
	HeaderBytesDelivered, HeaderBytesDeliveredErr, HeaderSizeLimit,
}

// The packet witness (witness/pcap): <session>/pcap/ holds the session's
// pcapng files, each bound into the session's chain (docs/RECORD.md, "What a
// session leaves" and "Integrity log and verification").
const (
	// ClassPTY and ClassPcap are the classes APTL_CAPTURE_CLASSES selects.
	ClassPTY  = "pty"
	ClassPcap = "pcap"

	PcapDir = "pcap"
	// TypePcapFile is the record of one finished pcap file.
	TypePcapFile = "pcap-file"

	// AttrPcap is the open record's pcap state (PcapOn, PcapUnavailable,
	// PcapDisabled); AttrPcapReason says why it is not on.
	AttrPcap       = "pcap"
	AttrPcapReason = "pcap_reason"
	// Checkpoint attributes: the current file, its size and running digest.
	AttrPcapFile   = "pcap_file"
	AttrPcapSize   = "pcap_size"
	AttrPcapSHA256 = "pcap_sha256"
	// pcap-file record attributes.
	AttrFile    = "file"
	AttrPackets = "packets"
	AttrBytes   = "bytes"
	AttrSHA256  = "sha256"
	AttrFirst   = "first"
	AttrLast    = "last"
	// Close record attributes: totals of the session's window.
	AttrPcapPackets     = "pcap_packets"
	AttrPcapBytes       = "pcap_bytes"
	AttrPcapFiles       = "pcap_files"
	AttrPcapKernelDrops = "pcap_kernel_drops"
	AttrPcapInterfaces  = "pcap_interfaces"
	AttrPcapTruncated   = "pcap_truncated"
	// AttrWitnessError is a close record's note that a witness failed to
	// close cleanly.
	AttrWitnessError = "witness_error"
	// AttrStream is a gap record's stream when it has no data: a terminal
	// stream, or StreamPcap.
	AttrStream = "stream"
	StreamPcap = "pcap"
)

// States of the pcap witness in the open record and the readiness file.
const (
	PcapOn          = "on"
	PcapUnavailable = "unavailable"
	PcapDisabled    = "disabled"
)

// Reasons of the pcap witness's gap records.
const (
	GapPcapRotation    = "pcap-rotation-limit" // packets past APTL_CAPTURE_PCAP_FILES, not stored
	GapPcapKernelDrops = "pcap-kernel-drops"   // the kernel dropped packets during the window
	GapPcapWriteFailed = "pcap-write-failed"   // a pcap file write failed; later packets not stored
	GapPcapLinkType    = "pcap-link-type"      // packets of an interface whose link type is not written
	GapPcapQueueFull   = "pcap-queue-full"     // the session's pcap writer fell behind the capture; packets not stored
	// The session closed before the capture caught up with it (within
	// its bound): packets of its last moments (AttrFirst to AttrLast)
	// the kernel had captured were not delivered to it, nor counted.
	GapPcapCatchUp = "pcap-catch-up-timeout"
	// The capture volume was low or critical (TypeDisk): the packets of
	// the window AttrFirst to AttrLast were counted, not stored.
	GapPcapDiskLow = "pcap-disk-low"
	// The witnesses' budget across sessions was reached (AttrBudget):
	// later packets were counted, not stored.
	GapPcapBudget = "pcap-budget"
)

// AttrQueueLimit is the bound a pcap-queue-full gap record's packets met:
// the session's own queue, or the batches of every session together.
const (
	AttrQueueLimit    = "queue_limit"
	QueueLimitSession = "session"
	QueueLimitEngine  = "engine"
)

// Attributes of the recovery record (RecoveryFile): which record it
// continues from, which records no checkpoint covered before the crash
// (the restarted sidecar signs them with the rest, though anyone with
// write access to the volume could have appended them, so the record says
// which they were), the file tails it did not read, and the typescript
// bytes no data record covers.
const (
	AttrLastRecord       = "last_record"        // seq of the last record that chains
	AttrLastSignedRecord = "last_signed_record" // seq of the last checkpoint, -1 for none
	AttrUnsignedRecords  = "unsigned_records"   // "first-last", or "none"
	// AttrNotRead names file tails the recovery did not read, being
	// larger than the sidecar writes unsigned.
	AttrNotRead           = "not_read"
	AttrUnaccountedOff    = "unaccounted_off"
	AttrUnaccountedLen    = "unaccounted_len"
	AttrUnaccountedSHA256 = "unaccounted_sha256"
)

// The session's signing key (docs/RECORD.md, "Session keys"): a one-time
// key of its own, certified ahead of time by a certificate authority that
// is not on the sidecar, taken from the pool on the state volume at open
// and destroyed when the session is sealed; or the host key. The open
// record names which (AttrSigner) and carries the certificate, so the
// first record of the session binds it.
const (
	AttrSigner         = "signer"          // SignerSessionKey or SignerHostKey
	AttrSignerCert     = "signer_cert"     // the certificate, authorized_keys form
	AttrSignerSerial   = "signer_serial"   // its serial, decimal
	AttrSignerFallback = "signer_fallback" // why the host key signs where a pool was asked for
	SignerSessionKey   = "session-key"
	SignerHostKey      = "host-key"
	// FallbackPoolEmpty is AttrSignerFallback's value when no key was
	// left in the pool; FallbackPoolFailed when taking one failed (its
	// error is logged).
	FallbackPoolEmpty  = "pool-empty"
	FallbackPoolFailed = "pool-failed"
	// FallbackKeyGone is a recovery record's AttrSignerFallback when the
	// session's key, which signs its recovery statement, was not there
	// at the restart (its error is logged): the host key signs it.
	FallbackKeyGone = "session-key-gone"
	// SignerPrincipal is the principal every session certificate names
	// and the allowed_signers line of the examiner's stock check gives.
	SignerPrincipal = "aptl-kali-capture"
)

// AttrExactSuffix names the attribute that carries a value's exact bytes,
// base64, beside a value that is not valid UTF-8 (attribute name +
// AttrExactSuffix). JSON would replace such bytes with U+FFFD as an escape
// that the verifier's canonical re-encoding does not reproduce (the record
// would not verify), and the record must agree with the typescript header,
// which keeps the bytes (escaped).
const AttrExactSuffix = "_b64"

// script(1)'s own header names: the typescript's start line and the
// timing file's H lines carry them (START_TIME, COLUMNS, LINES at the
// start; DURATION and EXIT_CODE on the done line).
const (
	ScriptStartTime = "START_TIME"
	ScriptColumns   = "COLUMNS"
	ScriptLines     = "LINES"
	ScriptDuration  = "DURATION"
	ScriptExitCode  = "EXIT_CODE"
)

// KaliSideDir is the folder of a run's sessions in the lab's harvest,
// <run-dir>/kali-side/<session_id>: a session folder held by it is in
// place, as one held by its run's folder is (evidence's placement check).
const KaliSideDir = "kali-side"

// The recovery record's statement of a log whose last line a crash cut
// mid-write (the examiner's Report.TornLog): where it starts, its length
// and its digest. Absent when the log ends in a whole record.
const (
	AttrLogTornOff    = "log_torn_off"
	AttrLogTornLen    = "log_torn_len"
	AttrLogTornSHA256 = "log_torn_sha256"
)

// The audit witness (witness/audit): <session>/audit/ holds the session's
// audit records in auditd's log format, in files bound into the session's
// chain like the pcap files; <root>/_audit/ and <root>/_proc-acct/ hold
// the records and process lifetimes of every lab session for the harvest.
const (
	ClassAudit = "audit"

	AuditDir     = "audit"
	AuditRootDir = "_audit"
	AuditLogFile = "audit.log"
	ProcAcctDir  = "_proc-acct"
	ProcAcctFile = "proc-acct.log"
	// TypeAuditFile is the record of one finished audit file; it carries
	// AttrFile, AttrRecords, AttrBytes, AttrSHA256, AttrFirst and AttrLast.
	TypeAuditFile = "audit-file"
	AttrRecords   = "records"

	// AttrAudit is the open record's audit state (AuditOn,
	// AuditUnavailable, AuditDisabled); AttrAuditReason says why it is not on.
	AttrAudit       = "audit"
	AttrAuditReason = "audit_reason"
	// Checkpoint attributes: the current file, its size and running digest.
	AttrAuditFile   = "audit_file"
	AttrAuditSize   = "audit_size"
	AttrAuditSHA256 = "audit_sha256"
	// Close record attributes: the session's audit session id (AttrAuditSes,
	// absent when none was bound) and totals.
	AttrAuditEvents  = "audit_events"
	AttrAuditRecords = "audit_records"
	AttrAuditFiles   = "audit_files"
	AttrAuditLost    = "audit_lost"
	// StreamAudit is the stream of the audit witness's gap records.
	StreamAudit = "audit"
)

// States of the audit witness in the open record.
const (
	AuditOn          = "on"
	AuditUnavailable = "unavailable"
	AuditDisabled    = "disabled"
)

// Reasons of the audit witness's gap records.
const (
	GapAuditLost        = "audit-lost"           // the kernel's lost counter rose during the window
	GapAuditOverrun     = "audit-overrun"        // the witness's multicast buffer overflowed
	GapAuditRotation    = "audit-rotation-limit" // records past the file limit, not stored
	GapAuditWriteFailed = "audit-write-failed"   // an audit file write failed; later records not stored
	// The witness was blind for a window (AttrFirst to AttrLast): the
	// kernel recorded nothing it relies on, so nothing was lost that
	// could be counted. count is the witness's rules not in effect.
	GapAuditDisabled     = "audit-disabled"      // someone turned the kernel's auditing off
	GapAuditRulesRemoved = "audit-rules-removed" // someone removed rules the witness relies on
	// The witness relay (witness/auditrelay) was unreachable: no record
	// reached the sidecar from the last read that found it alive to the
	// reconnection; error says why while the window is open.
	GapAuditRelayDown = "audit-relay-down"
	// The session closed before the witness had read and delivered what
	// the kernel sent before its end (within its bound): records of its
	// last moments (AttrFirst to AttrLast) may be missing, uncounted.
	GapAuditCatchUp = "audit-catch-up-timeout"
	// As GapPcapDiskLow and GapPcapBudget, of audit events.
	GapAuditDiskLow = "audit-disk-low"
	GapAuditBudget  = "audit-budget"
)

// GapReasons lists every gap reason, in docs/RECORD.md's order.
var GapReasons = []string{
	GapSizeLimit, GapWriteFailed, GapTimingWriteFailed,
	GapPcapRotation, GapPcapKernelDrops, GapPcapWriteFailed, GapPcapLinkType, GapPcapQueueFull, GapPcapCatchUp,
	GapPcapDiskLow, GapPcapBudget,
	GapAuditLost, GapAuditOverrun, GapAuditRotation, GapAuditWriteFailed, GapAuditDisabled, GapAuditRulesRemoved,
	GapAuditRelayDown, GapAuditCatchUp, GapAuditDiskLow, GapAuditBudget,
}

// Audit attribution (recorder/attribution.go): the session's kernel audit
// session id, which the launcher set through the session process's loginuid
// (launch/login/trampoline_linux.go), recorded once after the launch.
const (
	// TypeAuditSession is the record of the session's audit session.
	TypeAuditSession = "audit-session"
	// AttrAuditSes is its id, as the kernel's records print `ses`; the
	// audit witness repeats it in the close record.
	AttrAuditSes = "audit_ses"
	// AttrAuditTTY is the PTY slave's name (/dev/pts/N): the kernel's
	// records of the session's terminal processes say `tty=pts<N>`.
	AttrAuditTTY = "audit_tty"
	// AttrAuditSesReason says why the session has no audit session of its own.
	AttrAuditSesReason = "audit_ses_reason"
)

// Unattributed sessions (recorder/attribution.go): a session whose
// processes are not in an audit session of their own gets a record that
// says so, never silence (docs/AGENT.md, "Unattributed sessions").
const (
	// TypeUnattributed is the record; it carries AttrReason (one of the
	// Unattributed* values) and, for UnattributedNoAuditSession, the
	// launcher's why as AttrAuditSesReason.
	TypeUnattributed = "unattributed"
	// UnattributedNoAuditSession: the launcher reported no audit session
	// for the session (a loginuid already set, as in a stand-in agent
	// that root started from a session; no kernel audit; an older agent).
	UnattributedNoAuditSession = "no-audit-session"
	// UnattributedAuditUnconfirmed: the audit witness saw no SYSCALL
	// record of the session's reported audit session on the session's
	// terminal (AttrAuditTTY; "(none)" without a PTY) within AttrWithin
	// of the bind, or before the session closed: the reported ses may be
	// another session's.
	UnattributedAuditUnconfirmed = "audit-unconfirmed"
	// AttrWithin is the bound the confirmation had (a Go duration).
	AttrWithin = "within"
)

// UnattributedReasons lists every reason of an unattributed record, in the
// docs/RECORD.md's order.
var UnattributedReasons = []string{UnattributedNoAuditSession, UnattributedAuditUnconfirmed}

// Disk states of the capture volume (internal/diskstate; docs/OPERATING.md, "Disk
// states"): a disk record in each open session's chain at every
// transition, and the readiness file's disk key.
const (
	// TypeDisk is the record of a transition, or of the state a session
	// started in when it was not ok. It carries AttrDiskState,
	// AttrDiskFrom (absent at a start), AttrDiskFree, AttrDiskSize and the
	// marks the state was decided by.
	TypeDisk = "disk"
	// DiskOK, DiskLow and DiskCritical are AttrDiskState's values, and
	// the readiness file's disk values (ReadyKeyDisk).
	DiskOK       = "ok"
	DiskLow      = "low"
	DiskCritical = "critical"

	AttrDiskState = "state"
	AttrDiskFrom  = "from"
	AttrDiskFree  = "free_bytes"   // bytes free on the volume at the reading
	AttrDiskSize  = "volume_bytes" // the volume's size
	// The marks: low below AttrDiskLowMark free bytes, critical below
	// AttrDiskCriticalMark, ok again at AttrDiskResumeMark or above.
	AttrDiskLowMark      = "low_below"
	AttrDiskCriticalMark = "critical_below"
	AttrDiskResumeMark   = "resume_at"

	// ReadyKeyDisk is the readiness file's key of the disk state.
	ReadyKeyDisk = "disk"
)

// The witnesses' budget across sessions (internal/witnessbudget): the
// bytes of witness files per run and per volume. AttrBudget is a budget
// gap record's budget, BudgetRun or BudgetVolume.
const (
	AttrBudget   = "budget"
	BudgetRun    = "run"
	BudgetVolume = "volume"
)

// Finding classes: the verifier's verdicts in classes, the `class` of each
// finding of `verify --json` (docs/RECORD.md, "Finding classes"). Each
// anomaly kind of the verifier belongs to exactly one (evidence/kinds.go
// holds the table); a recorded gap is GapRecorded, and fails nothing. The
// names are CamelCase, as the examiners' tooling (Boundary's findings)
// names them, so the four it shares are spelled as it spells them.
const (
	FindingMissingFile          = "MissingFile"          // a file the records vouch for is missing or unreadable
	FindingUnvouched            = "Unvouched"            // a file or bytes that no signed record vouches for
	FindingChecksumMismatch     = "ChecksumMismatch"     // bytes differ from the digest a record holds
	FindingTruncation           = "Truncation"           // a file ends inside bytes a record vouches for
	FindingCountMismatch        = "CountMismatch"        // a count a record holds differs from what is there
	FindingTimingMismatch       = "TimingMismatch"       // the timing file's totals differ from the stored bytes
	FindingInvalidSignature     = "InvalidSignature"     // a signature does not verify, or a record that must be signed is not
	FindingUntrustedKey         = "UntrustedKey"         // no trusted key, or signed by a key not trusted or revoked
	FindingMalformedFileContent = "MalformedFileContent" // a record, timing line or tee line the writer does not write
	FindingChainBreak           = "ChainBreak"           // the hash chain is broken: a record removed, reordered, added
	FindingForeignEvidence      = "ForeignEvidence"      // evidence of another run or audit session among a session's
	FindingTeeMismatch          = "TeeMismatch"          // the tool server's tee differs from the record, or cannot be compared
	FindingUnfinalized          = "Unfinalized"          // no close record, and no recorder holds the log
	FindingGapRecorded          = "GapRecorded"          // the chain records data lost or not stored (no failure)
	FindingNotASession          = "NotASession"          // a path that is not a session folder
)

// FindingClasses lists every finding class, in docs/RECORD.md's order.
var FindingClasses = []string{
	FindingMissingFile, FindingUnvouched, FindingChecksumMismatch, FindingTruncation,
	FindingCountMismatch, FindingTimingMismatch, FindingInvalidSignature, FindingUntrustedKey,
	FindingMalformedFileContent, FindingChainBreak, FindingForeignEvidence, FindingTeeMismatch,
	FindingUnfinalized, FindingGapRecorded, FindingNotASession,
}

// HostKeyFile is the sidecar's host key's name in its state directory
// (docs/OPERATING.md, "Configuration", --state-dir), its public half
// HostKeyFile+".pub": the server writes it, and verify's messages tell an
// examiner where to find it, on every OS the examiner builds for.
const HostKeyFile = "ssh_host_ed25519_key"

// MaxIDLen is the lab's canonical id length limit, in bytes.
const MaxIDLen = 128

// ValidID reports whether s satisfies the lab's canonical id rule:
// ^[A-Za-z0-9_][A-Za-z0-9._-]*$, no "..", and at most MaxIDLen bytes.
//
// Ids become path components, so the rule keeps them from being ".", "..",
// hidden, option-like or containing a separator. It lives here, the floor
// both the writer (recorder, broker) and the examiner (examine) stand on,
// so the ids the recorder makes folders of and the ids an examiner types
// are held to the one rule.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLen || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case (c == '.' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
