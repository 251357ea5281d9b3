package tests

import (
	"os"
	"testing"

	"github.com/aptl/aptl-kali-capture/launch/login"
)

// TestMain makes the test binary host the login trampoline, as the
// sidecar's main does: the in-process broker's local sessions start
// through it, as `serve --launch local` starts them, and get an audit
// session of their own.
func TestMain(m *testing.M) {
	login.TrampolineMain()
	setParallelDefault()
	code := m.Run()
	removeSharedBuilds()
	reportClientSuites()
	os.Exit(code)
}
