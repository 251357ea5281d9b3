package integrity

import (
	"encoding/json"
	"fmt"
	"path/filepath"
)

// LastHead returns the message and signature of the last checkpoint in
// dir's log, for checking with ssh-keygen -Y verify independently of this
// program. It does not verify anything itself.
func LastHead(dir string) (message []byte, sig string, err error) {
	lines, err := readLog(filepath.Join(dir, PTYDir, LogFile))
	if err != nil {
		return nil, "", err
	}
	var run, session string
	for i, ln := range lines {
		var r Record
		if err := json.Unmarshal(ln.text, &r); err != nil {
			return nil, "", fmt.Errorf("%s record %d: %w", LogFile, i, err)
		}
		if r.Type == TypeOpen {
			run, session = r.Attrs[AttrRunID], r.Attrs[AttrSessionID]
		}
		if r.Type == TypeCheckpoint && r.Seq > 0 {
			message, sig = HeadMessage(run, session, r.Seq-1, r.Prev), r.Sig
		}
	}
	if sig == "" {
		return nil, "", fmt.Errorf("%s: no checkpoint", LogFile)
	}
	return message, sig, nil
}
