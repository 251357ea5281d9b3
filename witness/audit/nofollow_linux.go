package audit

import "syscall"

// noFollow refuses a planted symlink in place of a root log.
const noFollow = syscall.O_NOFOLLOW
