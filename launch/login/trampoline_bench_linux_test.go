package login

import (
	"os"
	"syscall"
	"testing"

	"github.com/aptl/aptl-kali-capture/launch"
)

// BenchmarkSessionStart measures what the trampoline adds to a session's
// start: start /bin/true as the session process (directly, as without the
// trampoline, or through it) and wait for its exit. Besides the wall time
// per start it reports the CPU time the children used (child-cpu-ns/op,
// from RUSAGE_CHILDREN), which a loaded machine does not inflate. Compare
// the two in the same run:
//
//	go test -run '^$' -bench SessionStart -count 6 ./launch/login/
func BenchmarkSessionStart(b *testing.B) {
	acct := Account{ID: launch.Identity{User: "self", UID: os.Geteuid(), GID: os.Getegid(), Home: "/", Shell: "/bin/true"}}
	for _, mode := range []string{"direct", "trampoline"} {
		b.Run(mode, func(b *testing.B) {
			devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			before := childCPU(b)
			for b.Loop() {
				cmd, err := Command(launch.Spec{User: "self", Command: "x", Stdin: devnull, Stdout: devnull, Stderr: devnull}, acct)
				if err != nil {
					b.Fatal(err)
				}
				var p *Process
				if mode == "direct" {
					if err = cmd.Start(); err == nil {
						p = NewProcess(cmd, acct.ID)
					}
				} else {
					p, err = Start(cmd, acct)
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Wait(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(childCPU(b)-before)/float64(b.N), "child-cpu-ns/op")
		})
	}
}

// childCPU is the user and system time of this process's reaped children.
func childCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
