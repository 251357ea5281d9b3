package recorder

import (
	"os"
	"testing"

	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// The test binary is its own session-key signer child when asked, as the
// sidecar's command is through its hidden session-signer subcommand.
func TestMain(m *testing.M) {
	if os.Getenv(testSignerEnv) == "1" {
		if err := sessionkey.ServeSigner(os.NewFile(3, "key"), os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const testSignerEnv = "APTL_RECORDER_TEST_SIGNER"
