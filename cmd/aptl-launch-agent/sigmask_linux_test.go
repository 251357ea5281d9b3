package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/launch/login"
)

// roleEnv selects the re-executed helper role of the test binary.
const roleEnv = "APTL_LAUNCH_AGENT_TEST_ROLE"

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "sigmask", "sigmask-control":
		os.Exit(sigmaskHelper(os.Getenv(roleEnv) == "sigmask"))
	}
	os.Exit(m.Run())
}

// sigmaskHelper prints the SigBlk line of a child it starts, as a session
// process would be started, after login.EnsureEmptySigmask if fix is set.
func sigmaskHelper(fix bool) int {
	if fix {
		if err := login.EnsureEmptySigmask(); err != nil {
			fmt.Println("error:", err)
			return 1
		}
	}
	out, err := exec.Command("grep", "^SigBlk:", "/proc/self/status").Output()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Print(string(out))
	return 0
}

// TestAgentClearsBlockedSignals starts the test binary from a starter that
// blocks SIGINT and SIGUSR1 (python3, which can): a child of the plain
// binary inherits part of that mask, a child after login.EnsureEmptySigmask none.
func TestAgentClearsBlockedSignals(t *testing.T) {
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Skipf("needs %s to start a process with blocked signals", python)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(role string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		starter := "import os, signal, sys\n" +
			"signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGUSR1})\n" +
			"os.execv(sys.argv[1], sys.argv[1:])\n"
		cmd := exec.CommandContext(ctx, python, "-c", starter, exe)
		cmd.Env = append(os.Environ(), roleEnv+"="+role)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s helper: %v: %s", role, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("sigmask-control"); got == "SigBlk:\t0000000000000000" {
		t.Fatalf("control child has an empty mask (%q): the test setup cannot show the problem", got)
	}
	if got := run("sigmask"); got != "SigBlk:\t0000000000000000" {
		t.Errorf("child after login.EnsureEmptySigmask: %q, want an empty mask", got)
	}
}
