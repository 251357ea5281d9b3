package pcap

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/witness/witnessfs"
)

// Equivalent mutant (gremlins): files.go gapAccounts `s.held.packets > 0` -> `>= 0`:
// equivalent, Lost() > 0 means a packet was taken (File.Stored), every
// packet taken is added to held right after, and held is emptied only
// there or just before such an add: held is never empty while Lost() > 0.

// TestCountedMerge: merging counts adds them and keeps the earliest first
// and latest last seen, also into an empty count, whose zero times are no
// instants: a gap record's window covers every packet in it.
func TestCountedMerge(t *testing.T) {
	at := func(s int) time.Time { return time.Unix(1700000000+int64(s), 0) }
	var empty counted
	o := counted{packets: 2, bytes: 120, first: at(10), last: at(20)}
	empty.merge(o)
	if empty != o {
		t.Errorf("an empty count merged with %+v is %+v", o, empty)
	}
	c := counted{packets: 1, bytes: 60, first: at(5), last: at(8)}
	c.merge(counted{packets: 3, bytes: 300, first: at(6), last: at(30)})
	if want := (counted{packets: 4, bytes: 360, first: at(5), last: at(30)}); c != want {
		t.Errorf("merged %+v, want %+v", c, want)
	}
	c = counted{packets: 1, bytes: 60, first: at(5), last: at(8)}
	c.merge(counted{packets: 1, bytes: 40, first: at(1), last: at(2)})
	if want := (counted{packets: 2, bytes: 100, first: at(1), last: at(8)}); c != want {
		t.Errorf("merged %+v, want %+v", c, want)
	}
}

// TestEpbLenIsTheBlockWritten: the size rotation reserves for a packet is
// the size of the enhanced packet block the pcapng writer writes for it
// (data padded to 32 bits), so a file is never cut past its limit.
func TestEpbLenIsTheBlockWritten(t *testing.T) {
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{Name: "lo", LinkType: layers.LinkTypeEthernet, SnapLength: SnapLen}, pcapgo.NgWriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 60, 1514, SnapLen} {
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		before := buf.Len()
		data := make([]byte, n)
		if err := w.WritePacket(gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: n, Length: n}, data); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, written := epbLen(n), int64(buf.Len()-before); got != written {
			t.Errorf("epbLen(%d) = %d, the writer wrote %d", n, got, written)
		}
	}
}

// readOnlyFiles is testFiles whose files take no write (opened read-only,
// so every write(2) fails).
func readOnlyFiles(t *testing.T, dir string) *fileSet {
	files := testFiles(t, dir)
	files.Create = func(name string) (*os.File, error) {
		return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
	}
	return files
}

// TestBufferedPacketsLostWithAFailedWriteAreAGap: packets held in the
// file's buffer when its write fails never reach the file; the close's
// pcap-write-failed gap counts them with the packets after the failure,
// from the first one held to the last one seen.
func TestBufferedPacketsLostWithAFailedWriteAreAGap(t *testing.T) {
	files := readOnlyFiles(t, t.TempDir())
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	t0 := time.Unix(1700000000, 0)
	put := func(i int) {
		files.write(&packet{ts: t0.Add(time.Duration(i) * time.Second), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 100), length: 100})
	}
	for i := range 3 {
		put(i) // held in the buffer
	}
	if _, err := tp.Checkpoint(func(string, map[string]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if files.Err() == nil {
		t.Fatal("the checkpoint's write to a read-only file did not fail")
	}
	put(3) // after the failure
	var gaps []map[string]string
	if _, err := tp.Close(func(typ string, a map[string]string) error {
		if typ == vocab.TypeGap {
			gaps = append(gaps, a)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{vocab.AttrReason: vocab.GapPcapWriteFailed, vocab.AttrStream: vocab.StreamPcap, vocab.AttrCount: "4", vocab.AttrBytes: "400",
		vocab.AttrFirst: witnessfs.Stamp(t0), vocab.AttrLast: witnessfs.Stamp(t0.Add(3 * time.Second))}
	if len(gaps) != 1 {
		t.Fatalf("gaps %v, want one %s", gaps, vocab.GapPcapWriteFailed)
	}
	for k, v := range want {
		if gaps[0][k] != v {
			t.Errorf("gap %s = %q, want %q (%v)", k, gaps[0][k], v, gaps[0])
		}
	}
}

// TestInterfaceBlockFailureNamesTheInterface: when the description block
// of a packet's interface cannot be written, the error that ends storing
// (the file record's write_error) says it was that interface's block.
func TestInterfaceBlockFailureNamesTheInterface(t *testing.T) {
	files := readOnlyFiles(t, t.TempDir())
	files.Buffer = 0 // every write is a write(2): the block's own fails
	files.write(&packet{ts: time.Unix(1700000000, 0), ifindex: 3, ifname: "veth3", linkType: layers.LinkTypeEthernet, data: make([]byte, 60), length: 60})
	if err := files.Err(); err == nil || !strings.Contains(err.Error(), "interface veth3") {
		t.Errorf("the write error %v does not name interface veth3", err)
	}
	if files.failed.packets != 1 {
		t.Errorf("%d packets counted as not stored, want the 1 whose interface block failed", files.failed.packets)
	}
	files.Finish()
}

// TestRotationWriteFailureIsAGap: when rotating ends storing (the last
// write of the file being finished fails, losing the packets held for
// it), every packet seen is in the pcap-write-failed gap: the lost ones,
// the one that asked for the new file and those after it; no next file
// is opened.
func TestRotationWriteFailureIsAGap(t *testing.T) {
	dir := t.TempDir()
	files := testFiles(t, dir)
	files.Limits = Limits{RotateBytes: 1000, Files: DefaultFiles}
	create := files.Create
	files.Create = func(name string) (*os.File, error) {
		if name == FileName(1) {
			return os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o600)
		}
		return create(name)
	}
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	const seen = 20 // 100 bytes each: the first file takes 6
	for range seen {
		files.write(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 100), length: 100})
	}
	var stored, failed int
	if _, err := tp.Close(func(typ string, a map[string]string) error {
		var n int
		var err error
		switch {
		case typ == vocab.TypePcapFile:
			n, err = strconv.Atoi(a[vocab.AttrPackets])
			stored += n
		case typ == vocab.TypeGap && a[vocab.AttrReason] == vocab.GapPcapWriteFailed:
			n, err = strconv.Atoi(a[vocab.AttrCount])
			failed += n
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if files.Made() != 1 {
		t.Fatalf("%d files made, want only the failed one: rotation opens no file once storing has ended", files.Made())
	}
	if _, err := os.Lstat(filepath.Join(dir, FileName(2))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a second file after the failure (%v): a file no record names", err)
	}
	if stored != 0 || failed != seen {
		t.Errorf("%d packets stored, %d in the write-failed gap; want 0 and all %d seen", stored, failed, seen)
	}
}
