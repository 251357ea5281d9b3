// Package login starts a session's login shell as an account, the same way
// for the local adapter (launch/local) and the launch agent (agentd): it
// reads passwd(5) and group(5) files, decides the identity and credentials,
// builds the login command and supervises the started process.
package login

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// A small reader for passwd(5) and group(5) files. os/user does not return the
// login shell, and the agent adapter reads the workload's files, which the
// sidecar's NSS cannot see. Only the plain files are read, never NSS modules.

const (
	// maxAccountFileBytes bounds how much of a passwd or group file is read. The
	// agent adapter reads files a root workload controls; real files are a few KiB.
	maxAccountFileBytes = 4 << 20
	// maxAccountLineBytes bounds one line. A group line lists its members, so it is
	// the longer kind; 64 KiB holds thousands of member names.
	maxAccountLineBytes = 64 << 10
	// MaxID is the largest valid uid or gid: (uid_t)-1 means "no change" to
	// setresuid(2), so it is not an account.
	MaxID = 1<<32 - 2
)

// ErrUserNotFound reports that the name or uid has no passwd entry. A missing
// passwd file is reported the same way: there is no such user in it.
var ErrUserNotFound = errors.New("user not found")

// PasswdEntry is one passwd(5) line, without the password and GECOS fields.
type PasswdEntry struct {
	Name        string
	UID, GID    int
	Home, Shell string
}

// LookupPasswd returns the first entry of the passwd file at path whose name is
// name, as getpwnam(3) does. It returns an error wrapping ErrUserNotFound if
// there is none, and refuses the whole file if a line before the match is malformed.
func LookupPasswd(path, name string) (PasswdEntry, error) {
	return findPasswd(path, func(e PasswdEntry) bool { return e.Name == name })
}

// LookupPasswdByUID is LookupPasswd by uid, as getpwuid(3).
func LookupPasswdByUID(path string, uid int) (PasswdEntry, error) {
	return findPasswd(path, func(e PasswdEntry) bool { return e.UID == uid })
}

func findPasswd(path string, match func(PasswdEntry) bool) (PasswdEntry, error) {
	var found PasswdEntry
	ok := false
	err := scanAccountFile(path, func(n int, line string) (bool, error) {
		e, err := parsePasswdLine(line)
		if err != nil {
			return false, fmt.Errorf("passwd %s line %d: %w", path, n, err)
		}
		if match(e) {
			found, ok = e, true
			return true, nil
		}
		return false, nil
	})
	if errors.Is(err, os.ErrNotExist) {
		return PasswdEntry{}, fmt.Errorf("passwd %s: %w", path, ErrUserNotFound)
	}
	if err != nil {
		return PasswdEntry{}, err
	}
	if !ok {
		return PasswdEntry{}, fmt.Errorf("passwd %s: %w", path, ErrUserNotFound)
	}
	return found, nil
}

// parsePasswdLine parses name:password:uid:gid:gecos:home:shell.
func parsePasswdLine(line string) (PasswdEntry, error) {
	f := strings.Split(line, ":")
	if len(f) != 7 {
		return PasswdEntry{}, fmt.Errorf("malformed entry: want 7 fields, got %d", len(f))
	}
	if f[0] == "" {
		return PasswdEntry{}, errors.New("malformed entry: empty name")
	}
	uid, err := parseID(f[2])
	if err != nil {
		return PasswdEntry{}, fmt.Errorf("malformed entry: uid: %w", err)
	}
	gid, err := parseID(f[3])
	if err != nil {
		return PasswdEntry{}, fmt.Errorf("malformed entry: gid: %w", err)
	}
	return PasswdEntry{Name: f[0], UID: uid, GID: gid, Home: f[5], Shell: f[6]}, nil
}

// supplementaryGroups returns the group list for user as initgroups(3) builds it:
// the primary gid first, then every group of the group file at path that lists
// user as a member, without duplicates. A missing group file gives the primary
// gid alone.
func supplementaryGroups(path, user string, primary int) ([]uint32, error) {
	gids := []uint32{uint32(primary)}
	seen := map[int]bool{primary: true}
	err := scanAccountFile(path, func(n int, line string) (bool, error) {
		gid, members, err := parseGroupLine(line)
		if err != nil {
			return false, fmt.Errorf("group %s line %d: %w", path, n, err)
		}
		if seen[gid] {
			return false, nil
		}
		for _, m := range members {
			if m == user {
				seen[gid] = true
				gids = append(gids, uint32(gid))
				break
			}
		}
		return false, nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return gids, nil
}

// parseGroupLine parses name:password:gid:member,member.
func parseGroupLine(line string) (gid int, members []string, err error) {
	f := strings.Split(line, ":")
	if len(f) != 4 {
		return 0, nil, fmt.Errorf("malformed entry: want 4 fields, got %d", len(f))
	}
	if f[0] == "" {
		return 0, nil, errors.New("malformed entry: empty name")
	}
	gid, err = parseID(f[2])
	if err != nil {
		return 0, nil, fmt.Errorf("malformed entry: gid: %w", err)
	}
	if f[3] != "" {
		members = strings.Split(f[3], ",")
	}
	return gid, members, nil
}

func parseID(s string) (int, error) {
	// ParseUint refuses signs and spaces, which Atoi would partly accept.
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxID {
		return 0, fmt.Errorf("not an id in 0..%d", uint64(MaxID))
	}
	return int(n), nil
}

// scanAccountFile calls fn for each entry line of the file at path, with its
// 1-based line number, until fn reports stop or an error. Blank lines, comments
// and NSS compat lines ("+name", "-name", which only nsswitch's compat mode gives
// meaning) are skipped. The file must be a regular file of at most
// maxAccountFileBytes, with lines of at most maxAccountLineBytes.
func scanAccountFile(path string, fn func(n int, line string) (stop bool, err error)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if fi.Size() > maxAccountFileBytes {
		return fmt.Errorf("%s: larger than %d bytes", path, maxAccountFileBytes)
	}
	// The limit also covers a file that grows after Stat.
	lr := &io.LimitedReader{R: f, N: maxAccountFileBytes + 1}
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, 4096), maxAccountLineBytes)
	for n := 1; sc.Scan(); n++ {
		if lr.N == 0 {
			return fmt.Errorf("%s: larger than %d bytes", path, maxAccountFileBytes)
		}
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if trimmed == "" || trimmed[0] == '#' || trimmed[0] == '+' || trimmed[0] == '-' {
			continue
		}
		stop, err := fn(n, line)
		if err != nil || stop {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%s: a line is longer than %d bytes", path, maxAccountLineBytes)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	if lr.N == 0 {
		return fmt.Errorf("%s: larger than %d bytes", path, maxAccountFileBytes)
	}
	return nil
}
