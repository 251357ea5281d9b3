package sessionkey

import "syscall"

// noFollow refuses a key file that is a link: the pool is the operator's,
// but a link there must not make the signer read, or Destroy overwrite,
// a file elsewhere.
const noFollow = syscall.O_NOFOLLOW
