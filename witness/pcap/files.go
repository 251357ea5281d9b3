package pcap

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// A session's pcap files: capture-000001.pcapng, capture-000002.pcapng, ...
// in <session>/pcap/, rotated and digested by witnessfs.FileSet (its
// comment says why the first files are kept past Limits.Files). Packets
// go through a user-space buffer, flushed at each checkpoint (within 1 s).

// FileName returns the name of a session's n-th pcap file (n from 1).
func FileName(n int) string { return fmt.Sprintf("capture-%06d.pcapng", n) }

// Limits are the rotation settings: RotateBytes is
// APTL_CAPTURE_PCAP_ROTATE_MB, Files APTL_CAPTURE_PCAP_FILES.
type Limits = witnessfs.Limits

// Defaults of the rotation settings.
const (
	DefaultRotateMB = 100
	DefaultFiles    = 10
)

// writeBuffer is the user-space buffer of the current file.
const writeBuffer = 1 << 20

// idbBound bounds the bytes an interface description block adds to a
// file (header, name, OS and resolution options), so rotation can keep a
// file under its limit before the block is written.
const idbBound = 128

// packet is one captured frame as the engine hands it to a session.
type packet struct {
	ts       time.Time
	ifindex  int
	ifname   string
	linkType layers.LinkType
	data     []byte // the captured bytes; valid only during the call
	length   int    // the frame's length on the wire
}

// counted is a count of packets not stored, and when they were seen.
type counted struct {
	packets, bytes int64
	first, last    time.Time
}

func (c *counted) add(p *packet) {
	if c.packets == 0 {
		c.first = p.ts
	}
	c.packets++
	c.bytes += int64(p.length)
	c.last = p.ts
}

// merge adds o's packets to c.
func (c *counted) merge(o counted) {
	if c.packets == 0 || o.first.Before(c.first) {
		c.first = o.first
	}
	if o.last.After(c.last) {
		c.last = o.last
	}
	c.packets += o.packets
	c.bytes += o.bytes
}

func (c *counted) gapAttrs(reason string) map[string]string {
	return map[string]string{
		vocab.AttrReason: reason, vocab.AttrStream: vocab.StreamPcap,
		vocab.AttrCount: strconv.FormatInt(c.packets, 10), vocab.AttrBytes: strconv.FormatInt(c.bytes, 10),
		vocab.AttrFirst: witnessfs.Stamp(c.first), vocab.AttrLast: witnessfs.Stamp(c.last),
	}
}

// fileSet writes one session's packets into its rotated files.
type fileSet struct {
	witnessfs.FileSet
	// rotated counts packets past Limits.Files; failed those after a
	// write error, which ends storing for the session.
	rotated, failed counted
	// held counts the packets in the FileSet's buffer, not yet written:
	// lost with it when its write fails (gapAccounts).
	held counted
	// diskLow counts the packets not stored since the capture volume
	// went low, until one is stored again; lowWindows are the windows
	// that ended so, not yet in a gap record (takeLowWindows).
	diskLow    counted
	lowWindows []counted
	// runBudget and volumeBudget count the packets past the witnesses'
	// budgets across sessions (witnessbudget).
	runBudget, volumeBudget counted
	// cur writes the FileSet's current file (or its last one); a new
	// file gets a new pcapng writer, with its own section header.
	cur *pcapFile
}

// pcapFile is the pcapng writer of the file being written.
type pcapFile struct {
	*witnessfs.File
	ng  *pcapgo.NgWriter
	ids map[int]int // ifindex -> interface id in this file
}

// newFileSet returns the file set that create makes files for.
func newFileSet(limits Limits, create func(name string) (*os.File, error), gate recorder.WitnessGate) *fileSet {
	return &fileSet{FileSet: witnessfs.FileSet{Class: vocab.ClassPcap, Name: FileName, CountAttr: vocab.AttrPackets, Buffer: writeBuffer, Limits: limits, Create: create, Gate: gate}}
}

// maxLowWindows bounds the low windows held between two checkpoints
// (about a second): past it, the last one takes in the next.
const maxLowWindows = 16

// notStored counts p where why says it belongs.
func (s *fileSet) notStored(why witnessfs.Refusal, p *packet) {
	switch why {
	case witnessfs.Full:
		s.rotated.add(p)
	case witnessfs.DiskLow:
		s.diskLow.add(p)
	case witnessfs.RunBudget:
		s.runBudget.add(p)
	case witnessfs.VolumeBudget:
		s.volumeBudget.add(p)
	default:
		s.failed.add(p)
	}
}

// endLowWindow ends the window of packets not stored on a low volume,
// if one is open: a packet is stored again, or the session closes.
func (s *fileSet) endLowWindow() {
	if s.diskLow.packets == 0 {
		return
	}
	if n := len(s.lowWindows); n == maxLowWindows {
		s.lowWindows[n-1].merge(s.diskLow)
	} else {
		s.lowWindows = append(s.lowWindows, s.diskLow)
	}
	s.diskLow = counted{}
}

// takeLowWindows returns the low windows ended since the last call.
func (s *fileSet) takeLowWindows() []counted {
	w := s.lowWindows
	s.lowWindows = nil
	return w
}

// write stores p, rotating first when it would not fit.
func (s *fileSet) write(p *packet) {
	if s.Err() != nil {
		s.failed.add(p)
		return
	}
	need := epbLen(len(p.data))
	if s.cur != nil {
		if _, known := s.cur.ids[p.ifindex]; !known {
			need += idbBound
		}
	}
	f, why := s.Next(need)
	if f == nil {
		s.notStored(why, p)
		return
	}
	s.endLowWindow()
	if s.cur == nil || s.cur.File != f {
		s.cur = &pcapFile{File: f, ids: map[int]int{}}
	}
	if err := s.cur.write(p); err != nil {
		s.Fail(err)
		s.failed.add(p)
		return
	}
	if f.Held() == 1 {
		s.held = counted{} // the ones before p reached the file
	}
	s.held.add(p)
}

// gapAccounts folds the packets lost with a buffer whose write failed
// (witnessfs.FileSet.Lost) into failed, once storing has ended.
func (s *fileSet) gapAccounts() {
	if s.Lost() > 0 && s.held.packets > 0 {
		s.failed.merge(s.held)
		s.held = counted{}
	}
}

// epbLen is the size of an enhanced packet block holding n bytes.
func epbLen(n int) int64 { return int64(32 + n + (4-n&3)&3) }

// write adds p, and its interface's description block the first time.
// The pcapng writer's own buffer is flushed after the packet, so the
// file's size is exact for the next rotation check.
func (f *pcapFile) write(p *packet) error {
	id, known := f.ids[p.ifindex]
	if !known {
		var err error
		if id, err = f.addInterface(p); err != nil {
			return err
		}
	}
	ci := gopacket.CaptureInfo{Timestamp: p.ts, CaptureLength: len(p.data), Length: max(p.length, len(p.data)), InterfaceIndex: id}
	err := f.ng.WritePacket(ci, p.data)
	if err == nil {
		err = f.ng.Flush()
	}
	if err != nil {
		return fmt.Errorf("pcap: write %s: %w", f.Name, err)
	}
	f.Stored(1, p.ts)
	return nil
}

// addInterface writes an interface description block (its name, link
// type and snap length); the file's first one comes with the section
// header.
func (f *pcapFile) addInterface(p *packet) (int, error) {
	intf := pcapgo.NgInterface{Name: p.ifname, OS: "linux", LinkType: p.linkType, SnapLength: SnapLen, TimestampResolution: 9}
	var id int
	var err error
	if f.ng == nil {
		opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{OS: "linux", Application: "aptl-kali-capture"}}
		f.ng, err = pcapgo.NewNgWriterInterface(f.File, intf, opts)
	} else {
		id, err = f.ng.AddInterface(intf)
	}
	if err == nil {
		err = f.ng.Flush()
	}
	if err != nil {
		return 0, fmt.Errorf("pcap: write %s: interface %s: %w", f.Name, p.ifname, err)
	}
	f.ids[p.ifindex] = id
	return id, nil
}
