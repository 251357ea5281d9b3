package sessionkey

import "syscall"

// signerProcAttr puts a signer child in a process group of its own, so a
// terminal's ^C or a group signal meant for serve does not end it before
// serve has signed its sessions' closing records with it, and has the
// kernel kill it if serve dies first, so no key outlives its sidecar in a
// process (its file stays in active/ for the restart's recovery). The
// kernel sends it when the forking thread ends; the children are started
// from goroutines that never lock their thread, whose threads the Go
// runtime never ends while serve runs.
func signerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
