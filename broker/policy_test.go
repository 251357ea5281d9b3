package broker

import (
	"errors"
	"strings"
	"testing"
)

func TestDecideEnv(t *testing.T) {
	accept := DefaultAcceptEnv
	tests := []struct {
		name, env, value string
		wantAccept       bool
		wantErr          error
		check            func(t *testing.T, ids sessionIDs)
	}{
		{name: "session id", env: envSessionID, value: "s-1.a_b", wantAccept: true,
			check: func(t *testing.T, ids sessionIDs) {
				if ids.session != "s-1.a_b" || ids.sessionInvalid {
					t.Errorf("ids = %+v", ids)
				}
			}},
		{name: "session id with dotdot", env: envSessionID, value: "a..b", wantErr: errInvalidID,
			check: func(t *testing.T, ids sessionIDs) {
				if ids.session != "" || !ids.sessionInvalid {
					t.Errorf("ids = %+v", ids)
				}
			}},
		{name: "session id with slash", env: envSessionID, value: "../etc", wantErr: errInvalidID},
		{name: "run id", env: envRunID, value: "run-7", wantAccept: true,
			check: func(t *testing.T, ids sessionIDs) {
				if ids.run != "run-7" || ids.runRefused != nil {
					t.Errorf("ids = %+v", ids)
				}
			}},
		{name: "reserved run id", env: envRunID, value: "_audit",
			check: func(t *testing.T, ids sessionIDs) {
				if ids.run != "" || ids.runRefused == nil || !strings.Contains(ids.runRefused.Error(), "reserved") {
					t.Errorf("ids = %+v", ids)
				}
			}},
		{name: "invalid run id", env: envRunID, value: "x y", wantErr: errInvalidID},
		{name: "trace id", env: envTraceID, value: "t1", wantAccept: true},
		{name: "trace id invalid", env: envTraceID, value: "t\n1", wantErr: errInvalidID},
		{name: "LANG", env: "LANG", value: "C.UTF-8", wantAccept: true},
		{name: "LC prefix", env: "LC_ALL", value: "C", wantAccept: true},
		{name: "TZ", env: "TZ", value: "UTC", wantAccept: true},
		{name: "LD_PRELOAD refused", env: "LD_PRELOAD", value: "/x.so", wantErr: errEnvNotAllow},
		{name: "PATH refused", env: "PATH", value: "/tmp", wantErr: errEnvNotAllow},
		{name: "bad name", env: "A=B", value: "x", wantErr: errEnvName},
		{name: "digit first", env: "1A", value: "x", wantErr: errEnvName},
		{name: "long name", env: strings.Repeat("A", maxEnvNameLen+1), value: "x", wantErr: errEnvName},
		{name: "long value", env: "LANG", value: strings.Repeat("x", maxEnvValueLen+1), wantErr: errEnvValue},
		{name: "control char value", env: "LANG", value: "C\x1b[2J", wantErr: errEnvValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ids sessionIDs
			d := decideEnv(tt.env, tt.value, accept, &ids)
			if accepted := d.err == nil; accepted != tt.wantAccept {
				t.Errorf("accepted = %v, want %v (err %v)", accepted, tt.wantAccept, d.err)
			}
			if tt.wantErr != nil && !errors.Is(d.err, tt.wantErr) {
				t.Errorf("err = %v, want %v", d.err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, ids)
			}
		})
	}
}

func TestDecideEnvLatestIDWins(t *testing.T) {
	var ids sessionIDs
	decideEnv(envSessionID, "bad id", nil, &ids)
	decideEnv(envSessionID, "good", nil, &ids)
	if ids.sessionInvalid || ids.session != "good" {
		t.Fatalf("ids = %+v, want the later valid id to win", ids)
	}
	decideEnv(envSessionID, "bad again", nil, &ids)
	if !ids.sessionInvalid || ids.session != "" {
		t.Fatalf("ids = %+v, want the later invalid id to win", ids)
	}
	decideEnv(envRunID, "_proc-acct", nil, &ids)
	decideEnv(envRunID, "r1", nil, &ids)
	if ids.runRefused != nil || ids.run != "r1" {
		t.Fatalf("ids = %+v, want the later valid run id to win", ids)
	}
}

func TestMayAcceptEnv(t *testing.T) {
	list := []string{"LANG", "LC_*", "MY_VAR"}
	for name, want := range map[string]bool{
		"LANG": true, "LANGUAGE": false, "LC_": true, "LC_CTYPE": true,
		"MY_VAR": true, "MY_VAR2": false, "LD_PRELOAD": false,
	} {
		if got := mayAcceptEnv(name, list); got != want {
			t.Errorf("mayAcceptEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestValidEnvPattern(t *testing.T) {
	for p, want := range map[string]bool{
		"LANG": true, "LC_*": true, "*": false, "": false, "A*B": false, "1X": false, "X-Y": false,
	} {
		if got := ValidEnvPattern(p); got != want {
			t.Errorf("ValidEnvPattern(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestCheckWindow(t *testing.T) {
	tests := []struct {
		name    string
		in      window
		zeroDef bool
		want    window
		wantErr bool
	}{
		{name: "normal", in: window{cols: 80, rows: 24}, want: window{cols: 80, rows: 24}},
		{name: "zero in pty-req", in: window{}, zeroDef: true, want: window{cols: 80, rows: 24}},
		{name: "zero in window-change", in: window{}, wantErr: true},
		{name: "one zero", in: window{cols: 80}, zeroDef: true, wantErr: true},
		{name: "huge cols", in: window{cols: 99999, rows: 24}, wantErr: true},
		{name: "max", in: window{cols: maxWindowDim, rows: maxWindowDim}, want: window{cols: maxWindowDim, rows: maxWindowDim}},
		{name: "huge pixels", in: window{cols: 80, rows: 24, width: 1 << 20}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := checkWindow(tt.in, tt.zeroDef)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLogSafe(t *testing.T) {
	if got := logSafe("sess-1"); got != "sess-1" {
		t.Errorf("logSafe(valid) = %q", got)
	}
	secret := "hunter2 \x1b[31m"
	if got := logSafe(secret); strings.Contains(got, "hunter2") {
		t.Errorf("logSafe leaked %q", got)
	}
}

func TestRefuseEnvOverLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		refusesSess bool
	}{
		{"LANG", false},
		{"", false}, // a malformed payload
		{envSessionID, true},
		{envRunID, true},
		{envTraceID, true},
	} {
		var ids sessionIDs
		if err := refuseEnvOverLimit(tc.name, 64, &ids); err == nil {
			t.Errorf("%q: env request past the limit accepted", tc.name)
		}
		if got := ids.refusal() != nil; got != tc.refusesSess {
			t.Errorf("%q: session refused = %v, want %v", tc.name, got, tc.refusesSess)
		}
		// A later valid run id does not lift the refusal.
		decideEnv(envRunID, "run-1", nil, &ids)
		if got := ids.refusal() != nil; got != tc.refusesSess {
			t.Errorf("%q: after a valid run id, session refused = %v, want %v", tc.name, got, tc.refusesSess)
		}
	}
}

// TestRequestBoundsAtTheirEdges: what a client may send at each bound of
// the session requests, and the first value past it: a 1x1 window and
// pixel sizes up to 65535 are real terminals; an env name of 64 bytes and
// a value of 1024 (spaces allowed, control bytes not) are taken; terminal
// modes of exactly maxModesLen bytes are.
func TestRequestBoundsAtTheirEdges(t *testing.T) {
	for _, tt := range []struct {
		name string
		win  window
		ok   bool
	}{
		{"1x1", window{cols: 1, rows: 1}, true},
		{"pixels at the bound", window{cols: 80, rows: 24, width: maxPixelDim, height: maxPixelDim}, true},
		{"width past it", window{cols: 80, rows: 24, width: maxPixelDim + 1}, false},
		{"height past it", window{cols: 80, rows: 24, height: maxPixelDim + 1}, false},
		{"rows past the bound", window{cols: 80, rows: maxWindowDim + 1}, false},
		{"no rows", window{cols: 80}, false},
		{"no columns", window{rows: 24}, false},
	} {
		if _, err := checkWindow(tt.win, false); (err == nil) != tt.ok {
			t.Errorf("window %s: %v, want ok %v", tt.name, err, tt.ok)
		}
	}
	name := strings.Repeat("N", maxEnvNameLen)
	if !validEnvName(name) || validEnvName(name+"N") {
		t.Errorf("env names of %d and %d bytes: %v %v, want taken and refused", maxEnvNameLen, maxEnvNameLen+1, validEnvName(name), validEnvName(name+"N"))
	}
	value := strings.Repeat(" ", maxEnvValueLen)
	if !validEnvValue(value) || validEnvValue(value+" ") {
		t.Errorf("env values of %d and %d spaces: %v %v, want taken and refused", maxEnvValueLen, maxEnvValueLen+1, validEnvValue(value), validEnvValue(value+" "))
	}
	for _, c := range []byte{0x1f, 0x7f, 0x00, '\n'} {
		if validEnvValue("a" + string(c)) {
			t.Errorf("an env value with byte %#x was taken", c)
		}
	}
	if !validEnvValue("~!\x80") {
		t.Error("an env value of printable and high bytes was refused")
	}
	modes := string(make([]byte, maxModesLen))
	if _, err := parsePtyReq(ptyReqPayload("xterm", 80, 24, 0, 0, []byte(modes))); err != nil {
		t.Errorf("terminal modes of %d bytes: %v", maxModesLen, err)
	}
	if _, err := parsePtyReq(ptyReqPayload("xterm", 80, 24, 0, 0, []byte(modes+"x"))); err == nil || !strings.Contains(err.Error(), "terminal modes too long") {
		t.Errorf("terminal modes of %d bytes: %v, want refused", maxModesLen+1, err)
	}
	id := strings.Repeat("i", 64)
	if logSafe(id) != id || logSafe(id+"i") == id+"i" {
		t.Errorf("logSafe of ids of 64 and 65 bytes: %q %q", logSafe(id), logSafe(id+"i"))
	}
}
