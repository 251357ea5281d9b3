package pcap

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/pcapng"
)

// readerSeed is the writer's sample file kept beside the reader, as its
// fuzz target's seed; APTL_CAPTURE_UPDATE_TESTDATA=1 rewrites it.
const readerSeed = "../../internal/pcapng/testdata/writer.pcapng"

// samplePackets are packets as the witness's writer is given them: two
// Ethernet interfaces and a raw IP one, lengths from empty to a packet
// cut at SnapLen (when long: the reader's fuzz seed stays small),
// timestamps in a fixed order.
func samplePackets(long bool) []packet {
	at := time.Date(2026, 12, 2, 8, 0, 0, 123456789, time.UTC)
	ifs := []struct {
		index int
		name  string
		link  layers.LinkType
	}{{1, "lo", layers.LinkTypeEthernet}, {7, "eth0", layers.LinkTypeEthernet}, {9, "tun0", layers.LinkTypeRaw}}
	var out []packet
	lengths := []int{60, 0, 1, 3, 1514, 40, 2, 77}
	if long {
		lengths = append(lengths, SnapLen, 9000, 5)
	}
	for i, n := range lengths {
		ifc := ifs[i%len(ifs)]
		data := bytes.Repeat([]byte{byte(i + 1)}, n)
		length := n
		if n == SnapLen {
			length = SnapLen + 1000 // cut at SnapLen, as the filter does
		}
		out = append(out, packet{ts: at.Add(time.Duration(i) * 1001 * time.Microsecond), ifindex: ifc.index, ifname: ifc.name, linkType: ifc.link, data: data, length: length})
	}
	return out
}

// writeSample writes samplePackets with the witness's writer, into one
// file, and returns its path.
func writeSample(t *testing.T, dir string, long bool) string {
	t.Helper()
	files := testFiles(t, dir)
	for _, p := range samplePackets(long) {
		files.write(&p)
	}
	files.Finish()
	if files.Made() != 1 || files.Err() != nil {
		t.Fatalf("files made %d, err %v", files.Made(), files.Err())
	}
	return filepath.Join(dir, FileName(1))
}

// TestReaderBoundIsTheWritersSnapLen: the project's reader reads what
// the writer writes at the writer's snap length (the bound evidence
// reads with), and refuses a packet one byte longer.
func TestReaderBoundIsTheWritersSnapLen(t *testing.T) {
	name := writeSample(t, t.TempDir(), true)
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := pcapng.Count(f, SnapLen); err != nil {
		t.Fatalf("the writer's file at its own snap length: %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if _, err := pcapng.Count(f, SnapLen-1); err == nil {
		t.Fatal("a reader bounded one byte under the writer's snap length read its file")
	}
}

// TestWriterFileReadsBackIdentically: every packet the writer was given
// reads back from its file with the project's reader, in order, with its
// interface (name, link type), timestamp, lengths and bytes; and tshark,
// the real tool, reads the same packets from the same file.
func TestWriterFileReadsBackIdentically(t *testing.T) {
	name := writeSample(t, t.TempDir(), true)
	want := samplePackets(true)
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapng.NewReader(f, SnapLen)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string // as tshark prints them below
	for i := 0; ; i++ {
		p, err := r.Next()
		if err == io.EOF {
			if i != len(want) {
				t.Fatalf("%d packets read back, %d written", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Fatalf("packet %d read back, %d written", i, len(want))
		}
		w := want[i]
		ifc := p.Interface
		if ifc.Name != w.ifname || ifc.LinkType != uint16(w.linkType) || ifc.SnapLen != SnapLen {
			t.Errorf("packet %d: interface %+v, want %s link type %d", i, ifc, w.ifname, w.linkType)
		}
		if !p.Time.Equal(w.ts) || int(p.Length) != w.length || !bytes.Equal(p.Data, w.data) {
			t.Errorf("packet %d: %d of %d bytes at %v; want %d of %d at %v", i, len(p.Data), p.Length, p.Time, len(w.data), w.length, w.ts)
		}
		lines = append(lines, fmt.Sprintf("%d\t%s\t%d.%09d\t%d\t%d", p.InterfaceID, ifc.Name, p.Time.Unix(), p.Time.Nanosecond(), len(p.Data), p.Length))
	}

	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("the comparison with the real tool needs tshark (Debian package tshark)")
	}
	out, err := exec.Command("tshark", "-n", "-r", name, "-T", "fields", "-E", "separator=/t",
		"-e", "frame.interface_id", "-e", "frame.interface_name", "-e", "frame.time_epoch", "-e", "frame.cap_len", "-e", "frame.len").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(lines) {
		t.Fatalf("tshark reads %d packets, the project's reader %d", len(got), len(lines))
	}
	for i := range got {
		if got[i] != lines[i] {
			t.Errorf("packet %d: tshark %q, the project's reader %q", i, got[i], lines[i])
		}
	}
}

// TestWriterSampleIsTheReaderSeed: the reader's fuzz seed is the file the
// writer writes today, so the fuzz target starts from the real thing.
func TestWriterSampleIsTheReaderSeed(t *testing.T) {
	b, err := os.ReadFile(writeSample(t, t.TempDir(), false))
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("APTL_CAPTURE_UPDATE_TESTDATA") == "1" {
		if err := os.WriteFile(readerSeed, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seed, err := os.ReadFile(readerSeed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, seed) {
		t.Fatalf("%s is not the file the writer writes now; run this test with APTL_CAPTURE_UPDATE_TESTDATA=1", readerSeed)
	}
}
