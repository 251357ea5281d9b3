package tests

import (
	"flag"
	"strconv"
)

// Which tests run in parallel, and why only those.
//
// A test here calls t.Parallel when most of its time is waiting, on the
// product's own clocks (the hangup grace, --port-taken-wait, keepalive
// intervals) or on servers and agents in processes of their own, and when
// it touches nothing that belongs to the whole test process or the whole
// machine. These stay serial:
//   - leak checks, which count the test process's goroutines, fds or heap
//     (lifecycle_test.go, the agent client suites that rerun them, load and
//     memory tests): another test's sessions would read as leaks;
//   - the kernel audit witness's tests, because the audit configuration is
//     one per machine;
//   - tests that measure time or ordering under a deadline.
//
// Go runs every serial top-level test to its end before it releases the
// parallel ones, so a serial test never overlaps a parallel one.

// parallelWaiters is how many parallel tests run at once when the command
// line does not say (-parallel). They mostly sleep, so on a 2-core machine
// four at a time keep the cores busy without starving the serial timers of
// the packages go test runs beside this one.
const parallelWaiters = 4

// setParallelDefault gives -test.parallel its default here unless the
// command line set it. TestMain calls it before m.Run.
func setParallelDefault() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", strconv.Itoa(parallelWaiters))
	}
}
