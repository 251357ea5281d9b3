package integrity

import (
	"encoding/json"
	"fmt"
)

// LastHead returns the message and signature of the last checkpoint in
// dir's log, for checking with ssh-keygen -Y verify independently of this
// program. It does not verify anything itself. The log is read as the
// verifier reads it: a regular file, never through a link, one bounded
// record at a time.
func LastHead(dir string) (message []byte, sig string, err error) {
	var run, session string
	var perr error
	err = readRecords(dir, LogFile, func(i int, ln logLine) bool {
		var r Record
		if perr = json.Unmarshal(ln.text, &r); perr != nil {
			perr = fmt.Errorf("%s record %d: %w", LogFile, i, perr)
			return false
		}
		if r.Type == TypeOpen {
			run, session = r.Attrs[AttrRunID], r.Attrs[AttrSessionID]
		}
		if r.Type == TypeCheckpoint && r.Seq > 0 {
			message, sig = HeadMessage(run, session, r.Seq-1, r.Prev), r.Sig
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", LogFile, err)
	}
	if sig == "" {
		return nil, "", fmt.Errorf("%s: no checkpoint", LogFile)
	}
	return message, sig, nil
}
