package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/auditfmt"
)

// The kernel sends each record as one netlink message: its type number,
// and text "audit(<sec>.<ms>:<serial>): field=value ...". The records of
// one event share the serial; a syscall event ends with an EOE record.
// auditd writes each as one line, "type=<NAME> msg=<text>", and leaves EOE
// out; the witness writes exactly that (RAW log format), so ausearch and
// aureport read its files.

// recordType is the EOE record's number (AUDIT_EOE).
const recordEOE = 1320

// Bounds of event assembly: a record's text is at most what one netlink
// message holds; an event at most maxEventRecords records; an event whose
// EOE never comes (records that are not part of a syscall) is complete
// eventLinger after its last record; at most maxOpenEvents are assembled
// at once (the oldest is completed to make room).
const (
	maxRecordText   = 1 << 14
	maxEventRecords = 512
	eventLinger     = 200 * time.Millisecond
	maxOpenEvents   = 4096
)

// Record is one kernel record.
type Record struct {
	Type uint16
	Text string // "audit(...): ...", as the kernel sent it
}

// Event is the records of one serial.
type Event struct {
	Serial  uint64
	Time    time.Time // the kernel's timestamp
	Records []Record
	// Ses is the audit session the event belongs to (unsetID: none).
	Ses uint32
	// Truncated counts records past maxEventRecords, not kept.
	Truncated int
	last      time.Time // when its last record arrived
}

// AppendLog appends the event's records in auditd's log format.
func (e *Event) AppendLog(b []byte) []byte {
	for _, r := range e.Records {
		b = append(b, "type="...)
		b = append(b, TypeName(r.Type)...)
		b = append(b, " msg="...)
		b = append(b, r.Text...)
		b = append(b, '\n')
	}
	return b
}

// parseHeader reads "audit(<sec>.<ms>:<serial>): " at the start of text.
func parseHeader(text string) (t time.Time, serial uint64, ok bool) {
	rest, found := strings.CutPrefix(text, "audit(")
	end := strings.IndexByte(rest, ')')
	if !found || end < 0 {
		return t, 0, false
	}
	stamp, ser, found := strings.Cut(rest[:end], ":")
	sec, ms, found2 := strings.Cut(stamp, ".")
	if !found || !found2 {
		return t, 0, false
	}
	s, err1 := strconv.ParseInt(sec, 10, 64)
	m, err2 := strconv.ParseInt(ms, 10, 64)
	serial, err3 := strconv.ParseUint(ser, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || m < 0 || m > 999 {
		return t, 0, false
	}
	return time.Unix(s, m*int64(time.Millisecond)), serial, true
}

// fieldUint reads a numeric field; unsetID when absent or malformed.
func fieldUint(text, name string) uint32 {
	v, ok := auditfmt.Field(text, name)
	if !ok {
		return unsetID
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return unsetID
	}
	return uint32(n)
}

// sessionOf is the audit session of an event: its SYSCALL record's ses;
// for a loginuid change (LOGIN) the new ses, or the old one when the
// change failed (the new one is then unset); else the first ses given.
func sessionOf(recs []Record) uint32 {
	for _, r := range recs {
		if r.Type == typeSyscall {
			return fieldUint(r.Text, "ses")
		}
	}
	for _, r := range recs {
		if r.Type == typeLogin {
			if s := fieldUint(r.Text, "ses"); s != unsetID {
				return s
			}
			return fieldUint(r.Text, "old-ses")
		}
	}
	for _, r := range recs {
		if _, ok := auditfmt.Field(r.Text, "ses"); ok {
			return fieldUint(r.Text, "ses")
		}
	}
	return unsetID
}

// assembler groups records into events.
type assembler struct {
	open  map[uint64]*Event
	order []uint64 // serials in arrival order of their first record
	// Malformed counts records whose text has no audit(...) header.
	malformed int64
	// latest is the kernel time of the last record taken. Not the
	// newest: the kernel sends records in the order it queued them, and a
	// clock stepped back (NTP, a resumed VM) must not hold the settled
	// instant in the future, where every closing session would leave at
	// once.
	latest time.Time
}

func newAssembler() *assembler { return &assembler{open: map[uint64]*Event{}} }

// add takes one record; it returns the events it completed.
func (a *assembler) add(typ uint16, text string, now time.Time) []*Event {
	text = strings.TrimRight(text, "\x00\n")
	if len(text) > maxRecordText {
		text = text[:maxRecordText]
	}
	// A user message's text is its sender's, and the kernel writes it as
	// it came: a newline in it would start a line of its own in the log,
	// which reads as a record the kernel never sent (a forged SYSCALL
	// line, TestLiveForgedUserMessage shows it). Every line is one record:
	// a newline inside a record's text is written as a space.
	text = strings.ReplaceAll(text, "\n", " ")
	t, serial, ok := parseHeader(text)
	if !ok {
		a.malformed++
		return nil
	}
	a.latest = t
	var done []*Event
	e := a.open[serial]
	if e == nil {
		if typ == recordEOE {
			return nil
		}
		if len(a.open) >= maxOpenEvents {
			done = append(done, a.complete(a.order[0]))
		}
		e = &Event{Serial: serial, Time: t}
		a.open[serial] = e
		a.order = append(a.order, serial)
	}
	e.last = now
	if typ == recordEOE {
		return append(done, a.complete(serial))
	}
	if len(e.Records) >= maxEventRecords {
		e.Truncated++
	} else {
		e.Records = append(e.Records, Record{Type: typ, Text: text})
	}
	return done
}

// expire completes the events whose last record is older than eventLinger.
func (a *assembler) expire(now time.Time) []*Event {
	var done []*Event
	for len(a.order) > 0 {
		e := a.open[a.order[0]]
		if e != nil && now.Sub(e.last) < eventLinger {
			break
		}
		if e == nil {
			a.order = a.order[1:]
			continue
		}
		done = append(done, a.complete(e.Serial))
	}
	return done
}

// stampCoarseness is how far a record's kernel time can trail the instant
// it stands for: the kernel reads a coarse clock (one tick, 4 ms at
// HZ=250) and the text keeps milliseconds.
const stampCoarseness = 20 * time.Millisecond

// settled is the instant before which every record has been taken and
// every event completed. When the socket was just found empty that is
// now; on a busy socket, the kernel time of the last record taken, less
// the clock's coarseness. It is never later than the first open event
// (events are opened in the kernel's order, so that is the oldest).
func (a *assembler) settled(idle bool, now time.Time) time.Time {
	at := a.latest.Add(-stampCoarseness)
	if idle {
		at = now
	}
	for len(a.order) > 0 {
		e := a.open[a.order[0]]
		if e == nil {
			a.order = a.order[1:]
			continue
		}
		if e.Time.Before(at) {
			at = e.Time
		}
		break
	}
	return at
}

// flush completes every open event.
func (a *assembler) flush() []*Event {
	var done []*Event
	for len(a.order) > 0 {
		if e := a.complete(a.order[0]); e != nil {
			done = append(done, e)
		}
	}
	return done
}

func (a *assembler) complete(serial uint64) *Event {
	e := a.open[serial]
	delete(a.open, serial)
	for i, s := range a.order {
		if s == serial {
			a.order = append(a.order[:i], a.order[i+1:]...)
			break
		}
	}
	if e != nil {
		e.Ses = sessionOf(e.Records)
	}
	return e
}

// TypeName is auditd's name of a record type, UNKNOWN[n] for one it does
// not know (as auditd writes it).
func TypeName(t uint16) string {
	if name, ok := typeNames[t]; ok {
		return name
	}
	return fmt.Sprintf("UNKNOWN[%d]", t)
}

const (
	typeLogin   = 1006
	typeSyscall = 1300
	typeExecve  = 1309
)

// typeNames are the record types (include/uapi/linux/audit.h) by the names
// auditd gives them (libaudit's msg_typetab).
var typeNames = map[uint16]string{
	1005: "USER", 1006: "LOGIN",
	1100: "USER_AUTH", 1101: "USER_ACCT", 1102: "USER_MGMT", 1103: "CRED_ACQ", 1104: "CRED_DISP",
	1105: "USER_START", 1106: "USER_END", 1107: "USER_AVC", 1108: "USER_CHAUTHTOK", 1109: "USER_ERR",
	1110: "CRED_REFR", 1111: "USYS_CONFIG", 1112: "USER_LOGIN", 1113: "USER_LOGOUT", 1114: "ADD_USER",
	1115: "DEL_USER", 1116: "ADD_GROUP", 1117: "DEL_GROUP", 1118: "DAC_CHECK", 1119: "CHGRP_ID",
	1120: "TEST", 1121: "TRUSTED_APP", 1122: "USER_SELINUX_ERR", 1123: "USER_CMD", 1124: "USER_TTY",
	1125: "CHUSER_ID", 1126: "GRP_AUTH", 1127: "SYSTEM_BOOT", 1128: "SYSTEM_SHUTDOWN",
	1129: "SYSTEM_RUNLEVEL", 1130: "SERVICE_START", 1131: "SERVICE_STOP",
	1300: "SYSCALL", 1302: "PATH", 1303: "IPC", 1304: "SOCKETCALL", 1305: "CONFIG_CHANGE",
	1306: "SOCKADDR", 1307: "CWD", 1309: "EXECVE", 1311: "IPC_SET_PERM", 1312: "MQ_OPEN",
	1313: "MQ_SENDRECV", 1314: "MQ_NOTIFY", 1315: "MQ_GETSETATTR", 1316: "KERNEL_OTHER",
	1317: "FD_PAIR", 1318: "OBJ_PID", 1319: "TTY", 1320: "EOE", 1321: "BPRM_FCAPS", 1322: "CAPSET",
	1323: "MMAP", 1324: "NETFILTER_PKT", 1325: "NETFILTER_CFG", 1326: "SECCOMP", 1327: "PROCTITLE",
	1328: "FEATURE_CHANGE", 1329: "REPLACE", 1330: "KERN_MODULE", 1331: "FANOTIFY",
	1332: "TIME_INJOFFSET", 1333: "TIME_ADJNTPVAL", 1334: "BPF", 1335: "EVENT_LISTENER",
	1336: "URINGOP", 1337: "OPENAT2", 1338: "DM_CTRL", 1339: "DM_EVENT",
	1400: "AVC", 1401: "SELINUX_ERR", 1402: "AVC_PATH", 1403: "MAC_POLICY_LOAD", 1404: "MAC_STATUS",
	1405: "MAC_CONFIG_CHANGE", 1420: "MAC_UNLBL_ALLOW", 1423: "MAC_IPSEC_ADDSA",
	1700: "ANOM_PROMISCUOUS", 1701: "ANOM_ABEND", 1702: "ANOM_LINK", 1703: "ANOM_CREAT",
	2100: "ANOM_LOGIN_FAILURES", 2101: "ANOM_LOGIN_TIME", 2102: "ANOM_LOGIN_SESSIONS",
	2103: "ANOM_LOGIN_ACCT", 2104: "ANOM_LOGIN_LOCATION", 2105: "ANOM_MAX_DAC",
	2106: "ANOM_MAX_MAC", 2107: "ANOM_AMTU_FAIL", 2108: "ANOM_RBAC_FAIL",
	2109: "ANOM_RBAC_INTEGRITY_FAIL", 2110: "ANOM_CRYPTO_FAIL", 2111: "ANOM_ACCESS_FS",
	2112: "ANOM_EXEC", 2113: "ANOM_MK_EXEC", 2114: "ANOM_ADD_ACCT", 2115: "ANOM_DEL_ACCT",
	2116: "ANOM_MOD_ACCT", 2117: "ANOM_ROOT_TRANS", 2118: "ANOM_LOGIN_SERVICE",
	2300: "USER_ROLE_CHANGE", 2309: "USER_DEVICE", 2404: "USER_MAC_POLICY_LOAD",
}
