//go:build !linux

package sessionkey

import "syscall"

// signerProcAttr: signer children run on Linux only (serve).
func signerProcAttr() *syscall.SysProcAttr { return nil }
