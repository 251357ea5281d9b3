package recorder

import (
	"testing"

	"github.com/aptl/aptl-kali-capture/evidence"
)

// TestCheckpointScheduleWithinExaminerBound keeps the recorder's signing
// schedule inside what the verifier and the recovery accept as an unsigned
// tail (evidence/unsigned.go): a checkpoint is due every checkpointBytes,
// and the record that crosses it (a data record coalesces at most 1 MiB,
// integrity/chain.go) must still fit. Raising checkpointBytes without the
// bound would make every crashed session's tail an anomaly.
func TestCheckpointScheduleWithinExaminerBound(t *testing.T) {
	if got, bound := int64(checkpointBytes+1<<20), int64(evidence.MaxUnsignedTail); got > bound {
		t.Errorf("checkpointBytes + one coalesced data record = %d bytes, over evidence.MaxUnsignedTail %d", got, bound)
	}
}
