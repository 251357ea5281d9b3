package broker

import (
	"fmt"

	"github.com/aptl/aptl-kali-capture/recorder"
)

// The refusals a client sees (after "aptl-kali-capture: ") when the
// capture volume cannot take a new session's record (docs/OPERATING.md, "Disk
// states"): they name the disk, so whoever reads them knows why and what
// to free.
const (
	// RefusalDiskCritical begins the refusal of a session while the
	// volume is critical; the free bytes and the mark follow.
	RefusalDiskCritical = "the capture volume is critically low on space"
	// RefusalDiskFull is the refusal of a session whose record could not
	// be made for want of space (its reserve, its folder).
	RefusalDiskFull = "recording is unavailable: the capture volume (disk) has no space left; session not started"
)

// diskCriticalRefusal is the refusal of a session on a critical volume.
func diskCriticalRefusal(e *recorder.DiskCriticalError) string {
	return fmt.Sprintf("%s (%s free, below %s); session not started", RefusalDiskCritical, mebibytes(e.Free), mebibytes(e.Below))
}

// mebibytes writes n bytes in whole MiB, or in KiB below 1 MiB.
func mebibytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
