package audit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
)

// Ownership that outlives a crash. The engine removes at stop only the
// rules it added: one it finds already loaded (EEXIST) is someone else's
// and stays. But a sidecar killed before its stop leaves its own rules
// behind, and the next run would find them loaded and leave them too, in
// the kernel for good, producing records of every login on the host. So
// the engine keeps the digests of the rules it owns in a file of its
// state (Config.OwnedRules, written at each change); a rule found loaded
// whose digest is there was its own, and is its own again.

// maxOwnedFile bounds the file read back: two rules a line of 65 bytes,
// far past maxRules.
const maxOwnedFile = 64 << 10

// ruleDigest names a rule by the bytes the engine sends the kernel.
func ruleDigest(d ruleData) string {
	sum := sha256.Sum256(d.marshal())
	return hex.EncodeToString(sum[:])
}

// readOwned returns the digests an earlier run recorded; a missing file
// is none, an unreadable or malformed one is none with an error to log.
func readOwned(path string) (map[string]bool, error) {
	owned := map[string]bool{}
	if path == "" {
		return owned, nil
	}
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return owned, nil
	}
	if err != nil {
		return owned, err
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxOwnedFile))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if b, err := hex.DecodeString(line); err != nil || len(b) != sha256.Size {
			return map[string]bool{}, errors.New("audit: the owned-rules file holds a line that is not a rule's digest")
		}
		owned[line] = true
	}
	return owned, sc.Err()
}

// saveOwned writes the digests of the rules the engine owns now (the
// file is removed when it owns none), replacing the file whole.
func (e *Engine) saveOwned() {
	if e.ownedFile == "" {
		return
	}
	var b strings.Builder
	seen := map[string]bool{}
	for _, r := range e.rules {
		if d := ruleDigest(r.load); r.owned && !seen[d] {
			seen[d] = true
			b.WriteString(d + "\n")
		}
	}
	for d := range e.intent {
		if !seen[d] {
			seen[d] = true
			b.WriteString(d + "\n")
		}
	}
	err := func() error {
		if b.Len() == 0 {
			if err := os.Remove(e.ownedFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		return safefs.ReplaceFile(e.ownedFile, []byte(b.String()), 0o600)
	}()
	if err != nil {
		e.log.Warn("audit: record the rules the witness owns (a crash would leave them in the kernel)", "err", err.Error())
	}
}
