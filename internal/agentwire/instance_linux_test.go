package agentwire

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestInstanceForm holds the instance to its one encoding: a started or
// probe-ok body whose instance is malformed is refused, naming the field;
// a well-formed one comes back as sent; an older agent's bodies decode with
// no instance.
func TestInstanceForm(t *testing.T) {
	good := Instance{ID: strings.Repeat("ab", 16), PID: 1234, Started: time.Date(2026, 12, 2, 1, 2, 3, 4, time.UTC)}
	got, err := DecodeProbeOK(EncodeProbeOK(good))
	if err != nil || got.ID != good.ID || got.PID != good.PID || !got.Started.Equal(good.Started) {
		t.Fatalf("probe-ok round trip: %+v, %v", got, err)
	}
	started := StartedMsg{User: "kali", Shell: "/bin/bash", AuditReported: true, Instance: good}
	m, err := DecodeStarted(started.Encode())
	if err != nil || m.Instance.ID != good.ID {
		t.Fatalf("started round trip: %+v, %v", m, err)
	}
	if m, err := DecodeStarted(StartedMsg{User: "kali", Shell: "/bin/bash", AuditReported: true}.Encode()); err != nil || m.Instance.Reported() {
		t.Fatalf("started without instance: %+v, %v", m, err)
	}
	if in, err := DecodeProbeOK(nil); err != nil || in.Reported() {
		t.Fatalf("empty probe-ok: %+v, %v", in, err)
	}
	raw := func(id string, pid uint32, started string) []byte {
		e := NewEncoder(nil)
		e.Str(id)
		e.U32(pid)
		e.Str(started)
		return e.Bytes()
	}
	when := good.Started.Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name, want string
		body       []byte
	}{
		{"short id", "instance id", raw("abc", 1, when)},
		{"upper-case id", "instance id", raw(strings.Repeat("AB", 16), 1, when)},
		{"pid 0", "pid 0", raw(good.ID, 0, when)},
		{"not a time", "start time", raw(good.ID, 1, "yesterday")},
		{"not UTC", "start time", raw(good.ID, 1, "2026-12-02T02:02:03.000000004+01:00")},
		{"trailing byte", "after the last field", append(raw(good.ID, 1, when), 0)},
	} {
		_, err := DecodeProbeOK(tc.body)
		var we *Error
		if !errors.As(err, &we) || we.Code != CodeProtocol || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodeProbeOK error %v, want a protocol error naming %q", tc.name, err, tc.want)
		}
	}
}
