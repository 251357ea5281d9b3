package agentwire

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// DefaultSocket is where the agent listens unless configured otherwise:
// an abstract socket, which lives in the network namespace the sidecar and
// the workload share, so neither needs a shared volume. The agent refuses
// peers inside its own PID namespace, which every workload process is.
const DefaultSocket = "@aptl-launch-agent"

// maxSocketName is the longest sun_path without its terminating NUL (unix(7)).
const maxSocketName = 107

// CheckSocket reports whether socket is a usable agent address: an
// absolute path, or "@" and a name of printable ASCII, at most 107 bytes.
// Both sides and both commands' settings check it the same way.
func CheckSocket(socket string) error {
	switch {
	case socket == "" || socket == "@":
		return errors.New("agentwire: agent socket is empty")
	case len(socket) > maxSocketName:
		return fmt.Errorf("agentwire: agent socket is longer than %d bytes", maxSocketName)
	case strings.HasPrefix(socket, "@"):
		for _, c := range []byte(socket[1:]) {
			if c <= ' ' || c >= 0x7f {
				return errors.New("agentwire: abstract agent socket name has a space or a non-printable byte")
			}
		}
	case !filepath.IsAbs(socket) || strings.IndexByte(socket, 0) >= 0:
		return errors.New("agentwire: agent socket must be an absolute path or @name")
	}
	return nil
}
