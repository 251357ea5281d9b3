package login

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

const passwdFixture = `root:x:0:0:root:/root:/bin/bash
# a comment line
   # an indented comment

daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
kali:x:1000:1000:Kali,,,:/home/kali:/usr/bin/zsh
noshell:x:1001:1001::/home/noshell:
kali:x:2000:2000:second kali:/home/kali2:/bin/sh
+nisuser
`

func TestLookupPasswd(t *testing.T) {
	tests := []struct {
		name    string
		content string
		user    string
		want    PasswdEntry
		wantErr string // substring; "" means success
		notFnd  bool   // error wraps ErrUserNotFound
	}{
		{name: "root", content: passwdFixture, user: "root",
			want: PasswdEntry{Name: "root", UID: 0, GID: 0, Home: "/root", Shell: "/bin/bash"}},
		{name: "after comments and blank lines", content: passwdFixture, user: "kali",
			want: PasswdEntry{Name: "kali", UID: 1000, GID: 1000, Home: "/home/kali", Shell: "/usr/bin/zsh"}},
		{name: "empty shell kept empty", content: passwdFixture, user: "noshell",
			want: PasswdEntry{Name: "noshell", UID: 1001, GID: 1001, Home: "/home/noshell", Shell: ""}},
		{name: "missing user", content: passwdFixture, user: "nobody", notFnd: true, wantErr: "not found"},
		{name: "nis compat line is not a user", content: passwdFixture, user: "+nisuser", notFnd: true, wantErr: "not found"},
		{name: "too few fields", content: "root:x:0:0:root:/root\n", user: "root",
			wantErr: "line 1: malformed entry: want 7 fields, got 6"},
		{name: "too many fields", content: "# c\nroot:x:0:0:root:/root:/bin/sh:extra\n", user: "root",
			wantErr: "line 2: malformed entry: want 7 fields, got 8"},
		{name: "non-numeric uid", content: "root:x:zero:0:root:/root:/bin/sh\n", user: "root", wantErr: "uid"},
		{name: "negative uid", content: "root:x:-1:0:root:/root:/bin/sh\n", user: "root", wantErr: "uid"},
		{name: "uid -1 as unsigned", content: "root:x:4294967295:0:root:/root:/bin/sh\n", user: "root", wantErr: "uid"},
		{name: "non-numeric gid", content: "root:x:0: 0:root:/root:/bin/sh\n", user: "root", wantErr: "gid"},
		{name: "empty name", content: ":x:0:0:root:/root:/bin/sh\n", user: "", wantErr: "empty name"},
		{name: "malformed line before match refuses file", content: "bad\nkali:x:1:1::/h:/bin/sh\n", user: "kali",
			wantErr: "line 1: malformed"},
		{name: "oversize line", content: "x:x:1:1:" + strings.Repeat("g", maxAccountLineBytes) + ":/h:/bin/sh\n", user: "x",
			wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testutil.WriteFixture(t, "passwd", tt.content)
			got, err := LookupPasswd(p, tt.user)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LookupPasswd error = %v, want containing %q", err, tt.wantErr)
				}
				if errors.Is(err, ErrUserNotFound) != tt.notFnd {
					t.Fatalf("errors.Is(%v, ErrUserNotFound) = %v, want %v", err, !tt.notFnd, tt.notFnd)
				}
				return
			}
			if err != nil {
				t.Fatalf("LookupPasswd: %v", err)
			}
			if got != tt.want {
				t.Fatalf("LookupPasswd = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLookupPasswdByUID(t *testing.T) {
	p := testutil.WriteFixture(t, "passwd", passwdFixture)
	got, err := LookupPasswdByUID(p, 1000)
	if err != nil || got.Name != "kali" {
		t.Fatalf("LookupPasswdByUID(1000) = %+v, %v; want kali", got, err)
	}
	if _, err := LookupPasswdByUID(p, 4242); !errors.Is(err, ErrUserNotFound) {
		t.Fatalf("LookupPasswdByUID(4242) error = %v, want ErrUserNotFound", err)
	}
}

func TestLookupPasswdFileBounds(t *testing.T) {
	t.Run("missing file is no such user", func(t *testing.T) {
		_, err := LookupPasswd(filepath.Join(t.TempDir(), "absent"), "root")
		if !errors.Is(err, ErrUserNotFound) {
			t.Fatalf("error = %v, want ErrUserNotFound", err)
		}
	})
	t.Run("oversize file", func(t *testing.T) {
		line := "u:x:1:1::/h:/bin/sh\n"
		big := strings.Repeat(line, maxAccountFileBytes/len(line)+1)
		p := testutil.WriteFixture(t, "passwd", "root:x:0:0::/root:/bin/sh\n"+big)
		_, err := LookupPasswd(p, "root")
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("error = %v, want a size error", err)
		}
	})
	t.Run("not a regular file", func(t *testing.T) {
		_, err := LookupPasswd(t.TempDir(), "root")
		if err == nil || errors.Is(err, ErrUserNotFound) {
			t.Fatalf("error = %v, want a non-regular-file error", err)
		}
	})
}

func TestSupplementaryGroups(t *testing.T) {
	const groupFixture = `root:x:0:
# comment
sudo:x:27:kali,other
users:x:100:other,kali
kali:x:1000:
dup:x:27:kali
`
	tests := []struct {
		name    string
		content string
		user    string
		primary int
		want    []uint32
		wantErr string
	}{
		{name: "member of two", content: groupFixture, user: "kali", primary: 1000, want: []uint32{1000, 27, 100}},
		{name: "primary also listed as member", content: groupFixture, user: "kali", primary: 27, want: []uint32{27, 100}},
		{name: "member of none", content: groupFixture, user: "nobody", primary: 65534, want: []uint32{65534}},
		{name: "substring is not membership", content: "g:x:5:kalix,xkali\n", user: "kali", primary: 1, want: []uint32{1}},
		{name: "malformed", content: "sudo:x:27\n", user: "kali", primary: 1, wantErr: "line 1: malformed entry: want 4 fields"},
		{name: "bad gid", content: "sudo:x:twenty:kali\n", user: "kali", primary: 1, wantErr: "gid"},
		{name: "oversize line", content: "big:x:9:" + strings.Repeat("m,", maxAccountLineBytes) + "\n", user: "kali",
			primary: 1, wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testutil.WriteFixture(t, "group", tt.content)
			got, err := supplementaryGroups(p, tt.user, tt.primary)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("supplementaryGroups = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("missing file gives primary only", func(t *testing.T) {
		got, err := supplementaryGroups(filepath.Join(t.TempDir(), "absent"), "kali", 1000)
		if err != nil || !reflect.DeepEqual(got, []uint32{1000}) {
			t.Fatalf("supplementaryGroups = %v, %v; want [1000], nil", got, err)
		}
	})
}

func TestValidLoginName(t *testing.T) {
	for name, want := range map[string]bool{
		"kali": true, "root": true, "svc_1.a-b": true, "": false, "-x": false,
		"a b": false, "a:b": false, strings.Repeat("u", 33): false,
	} {
		if got := ValidLoginName(name); got != want {
			t.Errorf("ValidLoginName(%q) = %v, want %v", name, got, want)
		}
	}
}
