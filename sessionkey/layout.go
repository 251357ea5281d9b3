// Package sessionkey gives each session a signing key of its own: a
// one-time ed25519 key certified ahead of time by a certificate authority
// that is not on the sidecar, so that whoever later steals the sidecar's
// state cannot re-sign a session that was sealed before the theft (its key
// is gone) nor sign as the CA (it never had the CA's key).
//
// An operator provisions a pool off the sidecar (Provision: `keys
// provision`): key pairs, each with an OpenSSH user certificate of its own
// serial. The sidecar loads the pool from its state volume (Open); each
// session takes one key (Pool.Take), which leaves the pool at once, is
// used for that session alone (a ledger of used serials refuses a second
// use, across restarts) and is destroyed when the session is sealed
// (Key.Destroy): its signer process ends and its file is overwritten and
// removed. The private half is never read by the sidecar's own process:
// a signer child (ServeSigner, the hidden `session-signer` subcommand)
// gets the open key file as a descriptor, and signs what the recorder
// asks over a pipe (signer.go gives the protocol).
package sessionkey

import (
	"fmt"
	"strconv"
	"strings"
)

// The pool's folders and files, under the state volume's
// session-keys/ folder (Dir):
//
//	pool/<serial>.key           a key not used yet, OpenSSH private key format, 0600
//	pool/<serial>.key-cert.pub  its certificate, authorized_keys form
//	active/                     the keys of the sessions open now, moved there by Take
//	refused/                    keys Take would not use (a serial used before, a certificate
//	                            that does not match its key or is outside its window), kept for the operator
//	used-serials                every serial ever taken, one a line: no key is used twice
const (
	Dir        = "session-keys"
	PoolDir    = "pool"
	ActiveDir  = "active"
	RefusedDir = "refused"
	LedgerFile = "used-serials"

	keySuffix  = ".key"
	certSuffix = ".key-cert.pub"
)

// serialDigits pads a serial in a file name, so that names sort as the
// serials do and Take uses the lowest first.
const serialDigits = 20

// keyName and certName are the files of serial.
func keyName(serial uint64) string  { return fmt.Sprintf("%0*d%s", serialDigits, serial, keySuffix) }
func certName(serial uint64) string { return fmt.Sprintf("%0*d%s", serialDigits, serial, certSuffix) }

// parseKeyName returns the serial of a key file's name, and whether it is one.
func parseKeyName(name string) (uint64, bool) {
	digits, ok := strings.CutSuffix(name, keySuffix)
	if !ok || len(digits) != serialDigits {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil
}
