package examine

import (
	"errors"
	"io"

	"github.com/aptl/aptl-kali-capture/internal/scriptfmt"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// checkTiming checks that every line of the timing file is one the
// recorder writes (scriptfmt, the one parser of the format), and that its
// I and O totals match the stored bytes of the chain. A refused line is
// reported with its line number and byte offset.
func (v *verifier) checkTiming() {
	var in, out int64
	err := scriptfmt.Scan(io.NewSectionReader(v.tm, 0, v.tmSize), vocab.TimingFile, func(e scriptfmt.Entry) error {
		switch e.Kind {
		case 'I':
			in += e.N
		case 'O':
			out += e.N
		}
		return nil
	})
	if err != nil {
		off := int64(-1)
		var le *scriptfmt.LineError
		if errors.As(err, &le) {
			off = le.Off
		}
		v.anomaly(vocab.TimingFile, -1, off, "%v", err)
		return
	}
	// Without a close record (a crash) the transcript may hold data whose
	// log records were never flushed; the unfinalized anomaly says so.
	if v.closeRec != nil && v.rep.Bytes.Stored-v.untimed != in+out {
		v.anomaly(vocab.TimingFile, v.closeSeq, v.tmGood, "timing accounts for %d bytes (I %d + O %d), the chain for %d stored and timed",
			in+out, in, out, v.rep.Bytes.Stored-v.untimed)
	}
}
