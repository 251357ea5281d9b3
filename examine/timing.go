package integrity

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// checkTiming checks that the timing file parses as util-linux's advanced
// format and that its I and O totals match the stored bytes of the chain.
func (v *verifier) checkTiming() {
	var in, out int64
	sc := bufio.NewScanner(io.NewSectionReader(v.tm, 0, v.tmSize))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	var off int64
	for sc.Scan() {
		line := sc.Bytes()
		if err := timingTotals(line, &in, &out); err != nil {
			v.anomaly(TimingFile, -1, off, "%v", err)
			return
		}
		off += int64(len(line)) + 1
	}
	if err := sc.Err(); err != nil {
		v.anomaly(TimingFile, -1, off, "%v", err)
		return
	}
	// Without a close record (a crash) the transcript may hold data whose
	// log records were never flushed; the unfinalized anomaly says so.
	if v.closeRec != nil && v.rep.Bytes.Stored-v.untimed != in+out {
		v.anomaly(TimingFile, v.closeSeq, v.tmGood, "timing accounts for %d bytes (I %d + O %d), the chain for %d stored and timed",
			in+out, in, out, v.rep.Bytes.Stored-v.untimed)
	}
}

var errTimingLine = errors.New("not a timing line")

func timingTotals(line []byte, in, out *int64) error {
	f := bytes.Fields(line)
	if len(f) < 3 || len(f[0]) != 1 {
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	if _, err := strconv.ParseFloat(string(f[1]), 64); err != nil {
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	switch f[0][0] {
	case 'I', 'O':
		n, err := strconv.ParseInt(string(f[2]), 10, 64)
		if err != nil || n < 0 || len(f) != 3 {
			return fmt.Errorf("%w: %.40q", errTimingLine, line)
		}
		if f[0][0] == 'I' {
			*in += n
		} else {
			*out += n
		}
	case 'H', 'S':
	default:
		return fmt.Errorf("%w: %.40q", errTimingLine, line)
	}
	return nil
}
