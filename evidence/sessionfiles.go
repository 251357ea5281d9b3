package evidence

import (
	"os"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// sessionFiles opens the record files of a session's pty folder: below
// the session folder dir by path, or, when pty is set, relative to that
// open folder. dir names the session in messages either way. Every file
// is opened as safefs opens it: no link followed, only a regular file.
type sessionFiles struct {
	dir string
	pty *os.File
}

func (s sessionFiles) open(name string) (*os.File, int64, error) {
	if s.pty != nil {
		return safefs.OpenRegularIn(s.pty, name)
	}
	return safefs.OpenRegular(s.dir, vocab.PTYDir+"/"+name)
}
