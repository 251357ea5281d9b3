package evidence

import "github.com/aptl/aptl-kali-capture/internal/vocab"

// The verifier's output vocabulary: the status of a session, the kind of
// each anomaly and of each note. These codes are the stable part of
// `verify --json` (docs/RECORD.md, "verify --json"); messages may be reworded,
// kinds may not. kinds_test.go holds the README's tables to exactly these
// lists, and every anomaly and note the package reports to one of them.

// Status is a session's verdict.
type Status string

const (
	// StatusOK: finalized, and every check passed.
	StatusOK Status = "ok"
	// StatusInProgress: no close record yet, and the recorder still holds
	// the log open (live.go); every check of what is there so far passed.
	StatusInProgress Status = "in-progress"
	// StatusUnfinalized: no close record and no recorder holds the log (a
	// sidecar crash, or a copy taken before the close); every check of
	// what is there passed.
	StatusUnfinalized Status = "unfinalized"
	// StatusTampered: a check failed (a file or record differs from what a
	// trusted signature vouches for, or nothing is signed by a trusted key).
	StatusTampered Status = "tampered"
	// StatusNotASession: the path given is no session folder (missing, a
	// run folder, a harvest, a capture root); the anomaly's message says
	// what it is and what to give instead. Nothing was verified, so
	// nothing can have been tampered with.
	StatusNotASession Status = "not-a-session"
)

// Statuses lists every Status.
var Statuses = []Status{StatusOK, StatusInProgress, StatusUnfinalized, StatusTampered, StatusNotASession}

// Kind names what an anomaly is.
type Kind string

const (
	KindNoTrustedKey        Kind = "no-trusted-key"          // no key given to check signatures with
	KindUntrustedKey        Kind = "untrusted-key"           // a checkpoint (or every one) is signed by a key not given
	KindRevokedKey          Kind = "revoked-key"             // a checkpoint is signed by a @revoked key
	KindSignatureInvalid    Kind = "signature-invalid"       // a checkpoint's signature does not verify
	KindCertificateInvalid  Kind = "certificate-invalid"     // signed by a certificate that does not hold, or not by the signer the open record names
	KindFileUnreadable      Kind = "file-unreadable"         // missing, a link, not a regular file, unreadable
	KindRecordMalformed     Kind = "record-malformed"        // a record does not parse, is not canonical, or lacks what it must hold
	KindChainBroken         Kind = "chain-broken"            // wrong seq or previous hash, record after the close, second open
	KindFormatUnsupported   Kind = "format-unsupported"      // the open record names another log format
	KindHeaderMismatch      Kind = "header-mismatch"         // the typescript's script header line differs from the open record
	KindDataDigestMismatch  Kind = "data-digest-mismatch"    // typescript bytes differ from their data record's digest
	KindDataMisplaced       Kind = "data-misplaced"          // a data record's offset is not where the previous one ended
	KindFileTruncated       Kind = "file-truncated"          // a file ends inside bytes a record vouches for
	KindFileDigestMismatch  Kind = "file-digest-mismatch"    // a file prefix differs from a checkpoint's or the close record's digest
	KindFileAppended        Kind = "file-appended"           // a file holds bytes past the size the close record vouches for
	KindUnsignedTailTooLong Kind = "unsigned-tail-too-large" // bytes past the last trusted checkpoint beyond the sidecar's bound; not read
	KindUnfinalized         Kind = "unfinalized"             // no close record and no recorder running
	KindCloseUnsigned       Kind = "close-unsigned"          // the close record is not followed by exactly one trusted checkpoint
	KindCountMismatch       Kind = "count-mismatch"          // a count in the close record differs from what the records hold
	KindTimingMalformed     Kind = "timing-malformed"        // a timing line the recorder does not write
	KindTimingTotals        Kind = "timing-total-mismatch"   // the timing file's I and O totals differ from the stored bytes
	KindRecovered           Kind = "recovered"               // the restarted sidecar's signed statement of the cut
	KindRecoveryInvalid     Kind = "recovery-invalid"        // a recovery file that does not continue the chain or is not trusted
	KindPcapMissing         Kind = "pcap-missing"            // a pcap file a signed record names is not there
	KindPcapExtra           Kind = "pcap-extra"              // a pcap file no signed record names
	KindAuditMissing        Kind = "audit-missing"           // an audit file a signed record names is not there
	KindAuditExtra          Kind = "audit-extra"             // an audit file no signed record names
	KindAuditForeignSes     Kind = "audit-foreign-ses"       // a session's audit file holds records of another audit session
	KindVerifierStopped     Kind = "verifier-stopped"        // malformed evidence stopped the verifier
	// The session's signed manifest (manifest.go); its signature's
	// findings are the signature kinds above, on SHA256SUMS.sig.
	KindManifestMalformed   Kind = "manifest-malformed"    // SHA256SUMS holds a line sha256sum's format or the sidecar does not write
	KindManifestMismatch    Kind = "manifest-mismatch"     // a file's SHA-256 differs from the manifest's
	KindManifestMissingFile Kind = "manifest-file-missing" // a file the manifest lists is not in the folder
	KindManifestUnlisted    Kind = "manifest-unlisted"     // a file in the session folder the manifest does not list, or a manifest no record announces
	// Run level (--run-dir) and the reconciliation with the tool server's tee.
	KindNotASession       Kind = "not-a-session"       // a path given, or an entry of the run folder, that is not a session folder
	KindNoSessions        Kind = "no-sessions"         // a run folder with no session
	KindRunMismatch       Kind = "run-mismatch"        // a session recorded for another run than the others
	KindSerialReused      Kind = "serial-reused"       // two sessions signed by session keys of one certificate serial
	KindSerialOutOfOrder  Kind = "serial-out-of-order" // a session's serial is above that of a session started well after it
	KindTeeWithoutSession Kind = "tee-without-session" // a tee whose session is not in the run
	KindTeeMalformed      Kind = "tee-malformed"       // a tee line that does not parse
	KindTeeMismatch       Kind = "tee-mismatch"        // what the client logged differs from what the sidecar recorded
	KindNotReconciled     Kind = "not-reconciled"      // the session could not be compared with its tee
)

// Kinds lists every Kind an anomaly can carry.
var Kinds = []Kind{
	KindNoTrustedKey, KindUntrustedKey, KindRevokedKey, KindSignatureInvalid, KindCertificateInvalid,
	KindFileUnreadable, KindRecordMalformed, KindChainBroken, KindFormatUnsupported,
	KindHeaderMismatch, KindDataDigestMismatch, KindDataMisplaced, KindFileTruncated,
	KindFileDigestMismatch, KindFileAppended, KindUnsignedTailTooLong, KindUnfinalized,
	KindCloseUnsigned, KindCountMismatch, KindTimingMalformed, KindTimingTotals,
	KindRecovered, KindRecoveryInvalid, KindPcapMissing, KindPcapExtra, KindAuditMissing, KindAuditExtra, KindAuditForeignSes, KindVerifierStopped,
	KindManifestMalformed, KindManifestMismatch, KindManifestMissingFile, KindManifestUnlisted,
	KindNotASession, KindNoSessions, KindRunMismatch, KindSerialReused, KindSerialOutOfOrder, KindTeeWithoutSession,
	KindTeeMalformed, KindTeeMismatch, KindNotReconciled,
}

// Notes say something an examiner should know that is not a failure.
const (
	// NoteFolderName: the session folder is not named by the session id
	// the signed open record holds (a renamed or harvested copy).
	NoteFolderName Kind = "folder-name"
	// NoteRunFolderName: the folder holding the session (or the run
	// folder given) is not named by the signed run id.
	NoteRunFolderName Kind = "run-folder-name"
	// NoteUnattributed: an unattributed record says the session's
	// processes are not in an audit session of their own.
	NoteUnattributed Kind = "unattributed"
	// NoteAuditOtherTTY: SYSCALL records of the session's audit session
	// name a terminal other than the slave the sidecar allocated.
	NoteAuditOtherTTY Kind = "audit-other-tty"
	// NoteAuditSesMoved: a LOGIN record in the session's audit files moved
	// one of its processes to another audit session (a loginuid written
	// with CAP_AUDIT_CONTROL); that session's records belong to it too.
	NoteAuditSesMoved Kind = "audit-ses-moved"
	// NoteManifestAbsent: the record that sealed the session announces
	// a manifest that is not in the folder (manifest.go says why that is
	// no failure).
	NoteManifestAbsent Kind = "manifest-absent"
)

// NoteKinds lists every Kind a note can carry.
var NoteKinds = []Kind{NoteFolderName, NoteRunFolderName, NoteUnattributed, NoteAuditOtherTTY, NoteAuditSesMoved, NoteManifestAbsent}

// kindClasses puts every anomaly kind in its finding class (vocab's
// Finding*): the class is what an examiner's tooling sorts findings by,
// the kind what the verifier checked. kinds_test.go holds it to Kinds and
// to vocab.FindingClasses.
var kindClasses = map[Kind]string{
	KindFileUnreadable:      vocab.FindingMissingFile,
	KindPcapMissing:         vocab.FindingMissingFile,
	KindAuditMissing:        vocab.FindingMissingFile,
	KindTeeWithoutSession:   vocab.FindingMissingFile, // the session of a tee is missing
	KindManifestMissingFile: vocab.FindingMissingFile,

	KindPcapExtra:           vocab.FindingUnvouched,
	KindAuditExtra:          vocab.FindingUnvouched,
	KindFileAppended:        vocab.FindingUnvouched,
	KindUnsignedTailTooLong: vocab.FindingUnvouched,
	KindManifestUnlisted:    vocab.FindingUnvouched,

	KindDataDigestMismatch: vocab.FindingChecksumMismatch,
	KindFileDigestMismatch: vocab.FindingChecksumMismatch,
	KindHeaderMismatch:     vocab.FindingChecksumMismatch,
	KindManifestMismatch:   vocab.FindingChecksumMismatch,

	KindFileTruncated:   vocab.FindingTruncation,
	KindCountMismatch:   vocab.FindingCountMismatch,
	KindTimingTotals:    vocab.FindingTimingMismatch,
	KindTimingMalformed: vocab.FindingMalformedFileContent,

	KindSignatureInvalid: vocab.FindingInvalidSignature,
	KindCloseUnsigned:    vocab.FindingInvalidSignature,

	KindNoTrustedKey: vocab.FindingUntrustedKey,
	KindUntrustedKey: vocab.FindingUntrustedKey,
	KindRevokedKey:   vocab.FindingUntrustedKey,
	// A certificate that does not hold, or the wrong signer, vouches for
	// nothing: signed, but not by what the keys given trust.
	KindCertificateInvalid: vocab.FindingUntrustedKey,
	// A session key signs one session: a second is a stolen or replayed key.
	KindSerialReused:     vocab.FindingUntrustedKey,
	KindSerialOutOfOrder: vocab.FindingUntrustedKey,

	KindRecordMalformed:   vocab.FindingMalformedFileContent,
	KindFormatUnsupported: vocab.FindingMalformedFileContent,
	KindTeeMalformed:      vocab.FindingMalformedFileContent,
	KindVerifierStopped:   vocab.FindingMalformedFileContent,
	KindManifestMalformed: vocab.FindingMalformedFileContent,

	KindChainBroken:     vocab.FindingChainBreak,
	KindDataMisplaced:   vocab.FindingChainBreak,
	KindRecoveryInvalid: vocab.FindingChainBreak,

	KindAuditForeignSes: vocab.FindingForeignEvidence,
	KindRunMismatch:     vocab.FindingForeignEvidence,

	KindTeeMismatch:   vocab.FindingTeeMismatch,
	KindNotReconciled: vocab.FindingTeeMismatch,

	KindUnfinalized: vocab.FindingUnfinalized,
	KindRecovered:   vocab.FindingUnfinalized,

	KindNotASession: vocab.FindingNotASession,
	KindNoSessions:  vocab.FindingNotASession,
}

// Class is the finding class of k (vocab.FindingClasses).
func (k Kind) Class() string { return kindClasses[k] }

// ClassCount is how many findings of one class a report holds.
type ClassCount struct {
	Class string `json:"class"`
	Count int    `json:"count"`
}

// ClassCounter counts findings by class, for verify --json's summaries.
type ClassCounter map[string]int

// Add counts anomalies by their kind's class, and each gap as GapRecorded.
func (c ClassCounter) Add(anomalies []Anomaly, gaps []Gap) {
	for _, a := range anomalies {
		c[a.Kind.Class()]++
	}
	c[vocab.FindingGapRecorded] += len(gaps)
}

// Merge adds the counts of o.
func (c ClassCounter) Merge(o ClassCounter) {
	for k, n := range o {
		c[k] += n
	}
}

// Summary lists the classes counted, in vocab.FindingClasses' order; []
// when none was.
func (c ClassCounter) Summary() []ClassCount {
	out := []ClassCount{}
	for _, class := range vocab.FindingClasses {
		if n := c[class]; n > 0 {
			out = append(out, ClassCount{Class: class, Count: n})
		}
	}
	return out
}
