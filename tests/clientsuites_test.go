package tests

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// The real clients and tools the suites drive (node ssh2, paramiko,
// asyncssh, stock ssh, scriptreplay, ssh-audit, ...) are optional on a
// developer's machine: a suite whose client is absent skips. go test ./...
// shows only "ok" for a package whose tests skipped, so a green run could
// hide that the tool servers' own client never ran. skipClient records
// every such skip, and TestMain ends the package's run with one line that
// names each skipped client and why.

var skippedClients struct {
	sync.Mutex
	why map[string]string // client suite -> the first reason it skipped
}

// skipClient skips the test because the real client or tool suite needs
// is absent, and records it for the summary line.
func skipClient(tb testing.TB, suite, reason string) {
	tb.Helper()
	skippedClients.Lock()
	if skippedClients.why == nil {
		skippedClients.why = map[string]string{}
	}
	if _, seen := skippedClients.why[suite]; !seen {
		skippedClients.why[suite] = reason
	}
	skippedClients.Unlock()
	tb.Skip(reason)
}

// clientSummary is the line TestMain prints: each skipped client suite with
// its reason, or that none skipped.
func clientSummary() string {
	skippedClients.Lock()
	defer skippedClients.Unlock()
	if len(skippedClients.why) == 0 {
		return "tests: no real-client suite skipped for a missing client"
	}
	suites := make([]string, 0, len(skippedClients.why))
	for s := range skippedClients.why {
		suites = append(suites, s)
	}
	sort.Strings(suites)
	parts := make([]string, len(suites))
	for i, s := range suites {
		parts[i] = s + " (" + skippedClients.why[s] + ")"
	}
	return fmt.Sprintf("tests: real-client suites SKIPPED (%d): %s", len(suites), strings.Join(parts, "; "))
}

// summaryOutput is where the line is seen. With -v the package's output
// is shown: stdout. Without it go test ./... discards a passing package's
// output, so on Linux the line goes to the go command's own stderr (the
// test binary's parent): best its very file description, taken with
// pidfd_getfd, so that a log file the go command writes at its own offset
// does not overwrite the line; else, where that is not allowed, the file
// reopened for appending (a terminal or a pipe); else stderr.
func summaryOutput() (io.Writer, func()) {
	if testing.Verbose() {
		return os.Stdout, func() {}
	}
	if f := parentStderr(); f != nil {
		return f, func() { f.Close() }
	}
	return os.Stderr, func() {}
}

// parentStderr returns the go command's stderr, or nil.
func parentStderr() *os.File {
	if runtime.GOOS != "linux" {
		return nil
	}
	if pidfd, err := unix.PidfdOpen(os.Getppid(), 0); err == nil {
		fd, err := unix.PidfdGetfd(pidfd, 2, 0)
		unix.Close(pidfd)
		if err == nil {
			return os.NewFile(uintptr(fd), "go command's stderr")
		}
	}
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/2", os.Getppid()), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return nil
	}
	return f
}

// reportClientSuites prints the summary line after the package's tests.
func reportClientSuites() {
	w, done := summaryOutput()
	defer done()
	fmt.Fprintln(w, clientSummary())
}
