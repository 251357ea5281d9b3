package login

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzAccountLine feeds one line to the passwd(5) and group(5) line
// parsers: the agent reads these files from the workload, which a root
// shell there may rewrite. A refused line yields zero values; an accepted
// one has exactly the fields the line spells, ids in 0..MaxID, and its
// fields written back as a line parse to the same values.
func FuzzAccountLine(f *testing.F) {
	for _, s := range []string{
		"root:x:0:0:root:/root:/bin/bash",
		"kali:x:1000:1000:Kali,,,:/home/kali:/usr/bin/zsh",
		"noshell:x:1001:1001::/home/noshell:",
		"big:x:4294967294:4294967294::/:/bin/sh",
		"neg:x:-1:0::/:/bin/sh",
		"plus:x:+1:0::/:/bin/sh",
		"sudo:x:27:kali,alice",
		"empty:x:100:",
		":x:1:",
		"a:b:c:d:e:f:g:h",
		"users:x:0100:,,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		checkPasswdLine(t, line)
		checkGroupLine(t, line)
	})
}

func checkPasswdLine(t *testing.T, line string) {
	e, err := parsePasswdLine(line)
	if err != nil {
		if e != (PasswdEntry{}) {
			t.Fatalf("passwd %q: refused (%v) but returned %+v", line, err, e)
		}
		return
	}
	f := strings.Split(line, ":")
	switch {
	case len(f) != 7 || e.Name == "" || e.Name != f[0] || e.Home != f[5] || e.Shell != f[6]:
		t.Fatalf("passwd %q parsed as %+v", line, e)
	case e.UID < 0 || e.UID > MaxID || e.GID < 0 || e.GID > MaxID:
		t.Fatalf("passwd %q: ids %d/%d out of 0..%d", line, e.UID, e.GID, MaxID)
	}
	again, err := parsePasswdLine(fmt.Sprintf("%s:x:%d:%d::%s:%s", e.Name, e.UID, e.GID, e.Home, e.Shell))
	if err != nil || again != e {
		t.Fatalf("passwd %q: %+v written back parses as %+v, %v", line, e, again, err)
	}
}

func checkGroupLine(t *testing.T, line string) {
	gid, members, err := parseGroupLine(line)
	if err != nil {
		if gid != 0 || members != nil {
			t.Fatalf("group %q: refused (%v) but returned %d %q", line, err, gid, members)
		}
		return
	}
	f := strings.Split(line, ":")
	switch {
	case len(f) != 4 || f[0] == "" || strings.Join(members, ",") != f[3]:
		t.Fatalf("group %q parsed as %d %q", line, gid, members)
	case gid < 0 || gid > MaxID:
		t.Fatalf("group %q: gid %d out of 0..%d", line, gid, MaxID)
	}
	gid2, members2, err := parseGroupLine(fmt.Sprintf("%s:x:%d:%s", f[0], gid, strings.Join(members, ",")))
	if err != nil || gid2 != gid || !reflect.DeepEqual(members2, members) {
		t.Fatalf("group %q: written back parses as %d %q, %v", line, gid2, members2, err)
	}
}
