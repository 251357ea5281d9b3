package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/sessionkey"
)

// `keys provision` runs off the sidecar, where the CA's key is kept: on
// the operator's machine, any OS. It writes a pool of session keys to
// copy onto the sidecar's state volume (package sessionkey).
func init() {
	register("keys", command{summary: "provision session keys with a CA, off the sidecar: keys provision --ca CA_KEY --count N --out DIR", run: runKeys})
}

// maxCAKeyFile bounds the CA key file read.
const maxCAKeyFile = 64 << 10

func runKeys(args []string) int {
	// Flags without the action are provision's (`keys -h` shows them).
	switch {
	case len(args) > 0 && args[0] == "provision":
		args = args[1:]
	case len(args) == 0 || !strings.HasPrefix(args[0], "-"):
		fmt.Fprintln(os.Stderr, "aptl-kali-capture keys: the one action is provision: aptl-kali-capture keys provision --ca CA_KEY --count N --out DIR")
		return exitUsage
	}
	e := newEnvFlags("keys")
	e.SetSynopsis(progName + " keys provision --ca CA_KEY [--count N] [--out DIR] [--first-serial S] [--valid-for DURATION] [--ca-passphrase-file FILE]")
	var caPath, passFile, out string
	var count int
	var firstSerial string
	var validFor time.Duration
	e.String(&caPath, "ca", "APTL_KEYS_CA", "", "the certificate authority's private key (OpenSSH format), kept off the sidecar")
	e.String(&passFile, "ca-passphrase-file", "APTL_KEYS_CA_PASSPHRASE_FILE", "", "a file holding the CA key's passphrase, when it has one")
	e.Int(&count, "count", "APTL_KEYS_COUNT", 100, "how many session keys to make (one per session)")
	e.String(&out, "out", "APTL_KEYS_OUT", "session-keys", "folder to write pool/ and allowed_signers into (copy pool/ into <state-dir>/session-keys/pool/ on the sidecar)")
	e.String(&firstSerial, "first-serial", "APTL_KEYS_FIRST_SERIAL", "", "the first certificate's serial (default: from the clock, so provisionings a second apart never repeat one)")
	e.Duration(&validFor, "valid-for", "APTL_KEYS_VALID_FOR", 90*24*time.Hour, "how long the certificates are valid from now (a session must start within it)")
	if err := e.Parse(args); err != nil {
		return failUsage("keys", err)
	}
	if caPath == "" {
		return failUsage("keys", e.SettingError("ca", "is required: the CA's private key signs the certificates"))
	}
	if err := cliconfig.CheckRange(e, "count", count, 1, sessionkey.MaxProvision); err != nil {
		return failUsage("keys", err)
	}
	if err := cliconfig.CheckRange(e, "valid-for", validFor, time.Hour, 10*365*24*time.Hour); err != nil {
		return failUsage("keys", err)
	}
	now := time.Now()
	first := sessionkey.DefaultFirstSerial(now)
	if firstSerial != "" {
		n, err := strconv.ParseUint(firstSerial, 10, 64)
		if err != nil {
			return failUsage("keys", e.SettingError("first-serial", "%q is not a serial (a decimal number)", firstSerial))
		}
		first = n
	}
	ca, err := loadCA(caPath, passFile)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture keys provision: %v\n", err)
		return exitFailure
	}
	// Valid from a little before now, so that a sidecar whose clock is a
	// few minutes behind the operator's takes the keys too.
	p := sessionkey.Provisioning{CA: ca, Count: count, FirstSerial: first, ValidAfter: now.Add(-10 * time.Minute), ValidBefore: now.Add(validFor)}
	lo, hi, err := sessionkey.Provision(out, p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture keys provision: %v\n", err)
		return exitFailure
	}
	allowed := filepath.Join(out, "allowed_signers")
	if err := os.WriteFile(allowed, []byte(sessionkey.AllowedSigners(ca.PublicKey())), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "aptl-kali-capture keys provision: %v\n", err)
		return exitFailure
	}
	fmt.Printf("provisioned %d session keys, serials %d to %d, valid until %s, in %s\n", count, lo, hi, p.ValidBefore.UTC().Format(time.RFC3339), filepath.Join(out, sessionkey.PoolDir))
	fmt.Printf("install them on the sidecar:  docker cp %s/. aptl-kali-capture:<state-dir>/%s/%s/\n", filepath.Join(out, sessionkey.PoolDir), sessionkey.Dir, sessionkey.PoolDir)
	fmt.Printf("examiners verify with %s (verify --key %s, ssh-keygen -Y verify -f %s)\n", allowed, allowed, allowed)
	return exitOK
}

// loadCA reads the CA's private key, with its passphrase from passFile
// when it has one.
func loadCA(path, passFile string) (gossh.Signer, error) {
	data, err := readBounded(path, maxCAKeyFile)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	defer clear(data)
	signer, err := gossh.ParsePrivateKey(data)
	var missing *gossh.PassphraseMissingError
	if errors.As(err, &missing) {
		if passFile == "" {
			return nil, fmt.Errorf("the CA key %s has a passphrase: give it with --ca-passphrase-file", path)
		}
		pass, perr := readBounded(passFile, 4<<10)
		if perr != nil {
			return nil, fmt.Errorf("the CA key's passphrase: %w", perr)
		}
		defer clear(pass)
		signer, err = gossh.ParsePrivateKeyWithPassphrase(data, trimNewline(pass))
	}
	if err != nil {
		return nil, fmt.Errorf("the CA key %s: %w", path, err)
	}
	return signer, nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// readBounded reads a whole file of at most limit bytes (readKeyFile),
// refusing a larger one.
func readBounded(path string, limit int64) ([]byte, error) {
	data, err := readKeyFile(path, limit+1)
	if err == nil && int64(len(data)) > limit {
		clear(data)
		return nil, fmt.Errorf("%s: larger than %d bytes", path, limit)
	}
	return data, err
}
