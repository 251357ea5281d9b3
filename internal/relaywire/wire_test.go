package relaywire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var allTypes = []Type{TypeHello, TypeWelcome, TypeStatus, TypeSet, TypeAddRule, TypeDelRule,
	TypeListRules, TypeStatusReply, TypeRule, TypeDone, TypeRecord, TypeOverrun, TypeIdle}

func TestParseRefusesWhatTheProtocolDoesNotAllow(t *testing.T) {
	big := make([]byte, MaxFrame+1)
	big[0] = byte(TypeRecord)
	for _, c := range []struct {
		name  string
		frame []byte
		want  []Type
		err   string
	}{
		{"empty", nil, allTypes, "empty frame"},
		{"past the bound", big, allTypes, "at most"},
		{"unknown type", []byte{99}, allTypes, "unexpected type 99 frame"},
		{"type not wanted", Encode(TypeStatus), []Type{TypeHello}, "unexpected status frame"},
		{"hello too short", Encode(TypeHello, Version), allTypes, "hello frame with a body of 4 bytes, want 8"},
		{"set too long", Encode(TypeSet, 1, 2, 3, 4), allTypes, "set frame with a body of 16 bytes, want 12"},
		{"status with a body", Encode(TypeStatus, 1), allTypes, "status frame with a body of 4 bytes, want 0"},
		{"rule without bytes", []byte{byte(TypeAddRule)}, allTypes, "add-rule frame with an empty body"},
		{"record without bytes", []byte{byte(TypeRecord)}, allTypes, "record frame with an empty body"},
		{"done without errno", []byte{byte(TypeDone), 0, 0}, allTypes, "done frame with a body of 2 bytes"},
		{"done past the message bound", append(Encode(TypeDone, 0), strings.Repeat("x", MaxMessage+1)...), allTypes, "want 4 to 260"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.frame, c.want...)
			if err == nil || !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Parse: %v, want a protocol error with %q", err, c.err)
			}
		})
	}
}

func TestFramesRoundTrip(t *testing.T) {
	f, err := Parse(Hello(RoleRecords), TypeHello)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ParseHello(f); err != nil || r != RoleRecords {
		t.Fatalf("hello: %v %v", r, err)
	}
	f, err = Parse(Encode(TypeSet, 0x10, 1, 8192), TypeSet)
	if err != nil || f.U32(0) != 0x10 || f.U32(1) != 1 || f.U32(2) != 8192 {
		t.Fatalf("set: %+v %v", f, err)
	}
	at := time.Unix(1796298833, 123456789)
	if f, err := Parse(Idle(at), TypeIdle); err != nil || !ParseIdle(f).Equal(at) {
		t.Fatalf("idle: %v %v", f, err)
	}
	rule := []byte{1, 2, 3, 0, 255}
	b, err := EncodeBytes(TypeAddRule, rule)
	if err != nil {
		t.Fatal(err)
	}
	if f, err = Parse(b, TypeAddRule); err != nil || !bytes.Equal(f.Body, rule) {
		t.Fatalf("add-rule: %+v %v", f, err)
	}
	for _, c := range []struct {
		errno uint32
		msg   string
	}{{0, ""}, {17, ""}, {1<<15 - 1, ""}, {0, "audit: no reply within 2s"}} {
		f, err := Parse(Done(c.errno, c.msg), TypeDone)
		if err != nil {
			t.Fatal(err)
		}
		errno, msg, err := ParseDone(f)
		if err != nil || errno != c.errno || msg != c.msg {
			t.Fatalf("done %v: %d %q %v", c, errno, msg, err)
		}
	}
	// A message of the bound is kept whole; past it, cut to it, never
	// refused by the sender. Equivalent mutant: Done's `> MaxMessage` as
	// `>=` cuts a message of exactly the bound to itself.
	f, _ = Parse(Done(0, strings.Repeat("m", MaxMessage)), TypeDone)
	if _, msg, err := ParseDone(f); err != nil || len(msg) != MaxMessage {
		t.Fatalf("done message of the bound: %d bytes, %v", len(msg), err)
	}
	f, _ = Parse(Done(0, strings.Repeat("m", 2*MaxMessage)), TypeDone)
	if _, msg, err := ParseDone(f); err != nil || len(msg) != MaxMessage {
		t.Fatalf("long done message: %d bytes, %v", len(msg), err)
	}
}

func TestHelloAndDoneRefuseTheirBadFields(t *testing.T) {
	for _, c := range []struct {
		frame []byte
		err   string
	}{
		{Encode(TypeHello, Version+1, uint32(RoleControl)), "version 2"},
		{Encode(TypeHello, Version, 0), "unknown role 0"},
		{Encode(TypeHello, Version, 3), "unknown role 3"},
	} {
		f, err := Parse(c.frame, TypeHello)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseHello(f); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseHello: %v, want %q", err, c.err)
		}
	}
	for _, c := range []struct {
		frame []byte
		err   string
	}{
		{Encode(TypeDone, 1<<15), "errno 32768"},
		{append(Encode(TypeDone, 0), "a\nb"...), "non-printable"},
		{append(Encode(TypeDone, 0), 0x7f), "non-printable"},
	} {
		f, err := Parse(c.frame, TypeDone)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ParseDone(f); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseDone: %v, want %q", err, c.err)
		}
	}
	if _, err := EncodeBytes(TypeRule, nil); err == nil {
		t.Error("EncodeBytes took an empty body")
	}
	if _, err := EncodeBytes(TypeRecord, make([]byte, MaxFrame)); err == nil || !strings.Contains(err.Error(), "want 1 to 65536") {
		t.Errorf("EncodeBytes of a body past the bound: %v", err)
	}
	if _, err := EncodeBytes(TypeRecord, make([]byte, MaxFrame-1)); err != nil {
		t.Errorf("EncodeBytes refused a body at the bound: %v", err)
	}
}

func TestCheckPeer(t *testing.T) {
	if err := CheckPeer(&unix.Ucred{Pid: 7, Uid: 0, Gid: 10001}, "the sidecar", 0, 10001, "--peer-uid"); err != nil {
		t.Fatalf("the right peer refused: %v", err)
	}
	for _, cred := range []unix.Ucred{{Uid: 0, Gid: 0}, {Uid: 1000, Gid: 10001}, {Uid: 0, Gid: 10002}} {
		err := CheckPeer(&cred, "the sidecar", 0, 10001, "--peer-uid, --peer-gid")
		if err == nil || !strings.Contains(err.Error(), "only the sidecar's uid 0 gid 10001") || !strings.Contains(err.Error(), "--peer-gid") {
			t.Errorf("peer %+v: %v", cred, err)
		}
	}
}

// FuzzParse: no input panics the decoder, and what it accepts is within
// the bounds and re-encodes to itself.
func FuzzParse(f *testing.F) {
	f.Add(Hello(RoleControl))
	f.Add(Encode(TypeSet, 1, 1, 0))
	f.Add(Done(17, "x"))
	f.Add([]byte{byte(TypeRecord), 1, 2, 3})
	f.Add(Encode(TypeOverrun, 5))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Parse(b, allTypes...)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("a refusal that is not a protocol error: %v", err)
			}
			return
		}
		if len(b) > MaxFrame || len(b) == 0 {
			t.Fatalf("accepted a frame of %d bytes", len(b))
		}
		if !bytes.Equal(append([]byte{byte(fr.Type)}, fr.Body...), b) {
			t.Fatal("the frame is not its bytes")
		}
		switch fr.Type {
		case TypeHello:
			if r, err := ParseHello(fr); err == nil && !bytes.Equal(Hello(r), b) {
				t.Fatal("hello does not re-encode to itself")
			}
		case TypeDone:
			if errno, msg, err := ParseDone(fr); err == nil && !bytes.Equal(Done(errno, msg), b) {
				t.Fatal("done does not re-encode to itself")
			}
		}
	})
}
