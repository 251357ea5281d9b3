package pcap

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/internal/witnessfs"
)

// A session's pcap files: capture-000001.pcapng, capture-000002.pcapng, ...
// in <session>/pcap/, each at most Limits.RotateBytes. Past Limits.Files
// the first files are kept and later packets are only counted (a gap
// record at close says how many, and when): the files already finished
// are signed in the chain, and deleting signed evidence to make room would
// turn a verified record into a missing file.

// FileName returns the name of a session's n-th pcap file (n from 1).
func FileName(n int) string { return fmt.Sprintf("capture-%06d.pcapng", n) }

// Limits are the rotation settings.
type Limits struct {
	RotateBytes int64 // APTL_CAPTURE_PCAP_ROTATE_MB
	Files       int   // APTL_CAPTURE_PCAP_FILES
}

// Defaults of the rotation settings.
const (
	DefaultRotateMB = 100
	DefaultFiles    = 10
)

// writeBuffer is the user-space buffer of the current file: packets are
// written through it and it is flushed at each checkpoint (within 1 s).
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

func (c *counted) gapAttrs(reason string) map[string]string {
	return map[string]string{
		vocab.AttrReason: reason, vocab.AttrStream: vocab.StreamPcap,
		vocab.AttrCount: strconv.FormatInt(c.packets, 10), vocab.AttrBytes: strconv.FormatInt(c.bytes, 10),
		vocab.AttrFirst: witnessfs.Stamp(c.first), vocab.AttrLast: witnessfs.Stamp(c.last),
	}
}

// digestWriter keeps the size and SHA-256 of what passes through it, so
// records vouch for the files without reading them back.
type digestWriter struct {
	w    io.Writer
	sum  hash.Hash
	size int64
}

func (d *digestWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.sum.Write(p[:n])
	d.size += int64(n)
	return n, err
}

// pcapFile is the file being written.
type pcapFile struct {
	name    string
	f       *os.File
	buf     *bufio.Writer
	dig     *digestWriter
	ng      *pcapgo.NgWriter
	ids     map[int]int // ifindex -> interface id in this file
	size    int64       // bytes in the file once everything is flushed
	packets int64
	first   time.Time
	last    time.Time
}

// fileSet writes one session's packets into its rotated files.
type fileSet struct {
	create   func(name string) (*os.File, error) // makes a new file 0600 in the pcap folder
	limits   Limits
	made     int
	cur      *pcapFile
	finished []witnessfs.FileRecord // not yet emitted
	// rotated counts packets past limits.Files; failed those after a
	// write error, which ends storing for the session.
	rotated, failed counted
	err             error
}

// write stores p, rotating first when it would not fit.
func (s *fileSet) write(p *packet) {
	if s.err != nil {
		s.failed.add(p)
		return
	}
	need := epbLen(len(p.data))
	if s.cur != nil {
		if _, known := s.cur.ids[p.ifindex]; !known {
			need += idbBound
		}
		if s.cur.packets > 0 && s.cur.size+need > s.limits.RotateBytes {
			s.finish()
		}
	}
	if s.cur == nil {
		if s.made >= s.limits.Files {
			s.rotated.add(p)
			return
		}
		if err := s.open(); err != nil {
			s.fail(err, p)
			return
		}
	}
	if err := s.cur.write(p); err != nil {
		s.fail(err, p)
	}
}

// epbLen is the size of an enhanced packet block holding n bytes.
func epbLen(n int) int64 { return int64(32 + n + (4-n&3)&3) }

func (s *fileSet) fail(err error, p *packet) {
	s.err = err
	s.failed.add(p)
}

// open starts the next file with its section header.
func (s *fileSet) open() error {
	s.made++
	name := FileName(s.made)
	f, err := s.create(name)
	if err != nil {
		return fmt.Errorf("pcap: create %s: %w", name, err)
	}
	buf := bufio.NewWriterSize(f, writeBuffer)
	dig := &digestWriter{w: buf, sum: sha256.New()}
	s.cur = &pcapFile{name: name, f: f, buf: buf, dig: dig, ids: map[int]int{}}
	return nil
}

// write adds p, and its interface's description block the first time.
func (f *pcapFile) write(p *packet) error {
	id, known := f.ids[p.ifindex]
	if !known {
		var err error
		if id, err = f.addInterface(p); err != nil {
			return err
		}
	}
	ci := gopacket.CaptureInfo{Timestamp: p.ts, CaptureLength: len(p.data), Length: max(p.length, len(p.data)), InterfaceIndex: id}
	if err := f.ng.WritePacket(ci, p.data); err != nil {
		return fmt.Errorf("pcap: write %s: %w", f.name, err)
	}
	if f.packets == 0 {
		f.first = p.ts
	}
	f.packets++
	f.last = p.ts
	f.size += epbLen(len(p.data))
	return nil
}

// addInterface writes an interface description block (its name, link
// type and snap length); the file's first one comes with the section
// header. The pcapng writer is flushed after it, so size stays exact.
func (f *pcapFile) addInterface(p *packet) (int, error) {
	intf := pcapgo.NgInterface{Name: p.ifname, OS: "linux", LinkType: p.linkType, SnapLength: SnapLen, TimestampResolution: 9}
	var id int
	var err error
	if f.ng == nil {
		opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{OS: "linux", Application: "aptl-kali-capture"}}
		f.ng, err = pcapgo.NewNgWriterInterface(f.dig, intf, opts)
	} else {
		id, err = f.ng.AddInterface(intf)
	}
	if err == nil {
		err = f.ng.Flush()
	}
	if err != nil {
		return 0, fmt.Errorf("pcap: write %s: interface %s: %w", f.name, p.ifname, err)
	}
	f.ids[p.ifindex] = id
	f.size = f.dig.size
	return id, nil
}

// flush writes everything buffered to the file.
func (f *pcapFile) flush() error {
	var err error
	if f.ng != nil {
		err = f.ng.Flush()
	}
	if err == nil {
		err = f.buf.Flush()
	}
	if err != nil {
		return fmt.Errorf("pcap: write %s: %w", f.name, err)
	}
	return nil
}

// sync flushes the current file and makes it durable; it returns the
// file's name, size and running digest for the checkpoint, or "" when no
// file is open.
func (s *fileSet) sync() (name string, size int64, sum string) {
	f := s.cur
	if f == nil {
		return "", 0, ""
	}
	if s.err == nil {
		err := f.flush()
		if err == nil {
			err = f.f.Sync()
		}
		if err != nil {
			s.err = err
		}
	}
	return f.name, f.dig.size, hex.EncodeToString(f.dig.sum.Sum(nil))
}

// finish flushes, syncs and closes the current file and queues its record.
func (s *fileSet) finish() {
	f := s.cur
	if f == nil {
		return
	}
	s.cur = nil
	var errs []error
	if s.err == nil {
		errs = append(errs, f.flush(), f.f.Sync())
	}
	errs = append(errs, f.f.Close())
	err := errors.Join(errs...)
	rec := witnessfs.FileRecord{Name: f.name, CountAttr: vocab.AttrPackets, Count: f.packets, Size: f.dig.size, SHA256: hex.EncodeToString(f.dig.sum.Sum(nil)), First: f.first, Last: f.last}
	if s.err != nil {
		err = errors.Join(s.err, err)
	}
	if err != nil {
		s.err = err
		rec.WriteFailure = err.Error()
	}
	s.finished = append(s.finished, rec)
}

// takeFinished returns the records of the files finished since the last call.
func (s *fileSet) takeFinished() []witnessfs.FileRecord {
	r := s.finished
	s.finished = nil
	return r
}
