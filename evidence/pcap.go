package evidence

import (
	"io"
	"regexp"

	"github.com/aptl/aptl-kali-capture/internal/pcapng"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The packet witness's files (<session>/pcap/capture-NNNNNN.pcapng),
// checked as every witness's files are (witnessfiles.go); a finished
// file's record counts its packets.

// PcapReport is what the record says of the session's packet capture.
type PcapReport struct {
	State   string `json:"state"` // on, unavailable, disabled
	Reason  string `json:"reason,omitempty"`
	Files   int    `json:"files"`   // finished files a signed record vouches for
	Packets int64  `json:"packets"` // packets in them
}

var pcapClass = &witnessClass{
	dir: vocab.PcapDir, fileName: regexp.MustCompile(`^capture-[0-9]{6}\.pcapng$`),
	fileType: vocab.TypePcapFile, countAttr: vocab.AttrPackets,
	ckFile: vocab.AttrPcapFile, ckSize: vocab.AttrPcapSize, ckSHA256: vocab.AttrPcapSHA256,
	closeFiles: vocab.AttrPcapFiles, stream: vocab.StreamPcap,
	stateAttr: vocab.AttrPcap, reasonAttr: vocab.AttrPcapReason,
	missingKind: KindPcapMissing, extraKind: KindPcapExtra,
	count: func(_ *verifier, _ string, r io.Reader) (int64, error) { return countPcapng(r) },
}

// pcapReport is the report of the pcap evidence; nil when there is none.
func pcapReport(w *witnessEvidence) *PcapReport {
	if w.rep == nil {
		return nil
	}
	return &PcapReport{State: w.rep.State, Reason: w.rep.Reason, Files: w.rep.Files, Packets: w.rep.Count}
}

// countPcapng counts the packets of a pcapng file the sidecar wrote,
// with the project's bounded reader: a file that says more than the
// writer could have written (a snap or capture length past its snap
// length, oversized blocks, too many interfaces or options) or ends
// inside a block is an error naming the offset, never a count.
func countPcapng(r io.Reader) (int64, error) { return pcapng.Count(r, pcapng.SnapLen) }
