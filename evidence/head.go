package evidence

import (
	"encoding/json"
	"fmt"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// LastHead returns the message and signature of the last checkpoint in
// dir's log, for checking with ssh-keygen -Y verify independently of this
// program. It does not verify anything itself. The log is read as the
// verifier reads it: a regular file, never through a link, one bounded
// record at a time.
func LastHead(dir string) (message []byte, sig string, err error) {
	var run, session string
	var perr error
	err = readRecords(sessionFiles{dir: dir}, vocab.LogFile, func(i int, ln logLine) bool {
		var r integrity.Record
		if perr = json.Unmarshal(ln.text, &r); perr != nil {
			perr = fmt.Errorf("%s record %d: %w", vocab.LogFile, i, perr)
			return false
		}
		if r.Type == vocab.TypeOpen {
			run, session = r.Attrs[vocab.AttrRunID], r.Attrs[vocab.AttrSessionID]
		}
		if r.Type == vocab.TypeCheckpoint && r.Seq > 0 {
			message, sig = integrity.HeadMessage(run, session, r.Seq-1, r.Prev), r.Sig
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", vocab.LogFile, err)
	}
	if sig == "" {
		return nil, "", fmt.Errorf("%s: no checkpoint", vocab.LogFile)
	}
	return message, sig, nil
}

// SignerCert returns the certificate the open record of dir's log says
// signs the session (vocab.AttrSignerCert, authorized_keys form), "" for
// a session its host key signs: an examiner reads its serial and window
// with `ssh-keygen -L -f`. Like LastHead it verifies nothing; verify
// holds the certificate to the CA and to every signature.
func SignerCert(dir string) (string, error) {
	var cert string
	var perr error
	err := readRecords(sessionFiles{dir: dir}, vocab.LogFile, func(i int, ln logLine) bool {
		var r integrity.Record
		if perr = json.Unmarshal(ln.text, &r); perr == nil && r.Type != vocab.TypeOpen {
			perr = fmt.Errorf("record 0 is a %.32q record, not the open record", r.Type)
		}
		cert = r.Attrs[vocab.AttrSignerCert]
		return false // the open record is the first
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w", vocab.LogFile, err)
	}
	return cert, nil
}
