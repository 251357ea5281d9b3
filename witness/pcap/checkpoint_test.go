package pcap

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// TestCheckpointNamesTheCurrentFile: a checkpoint before any file adds
// nothing to the checkpoint record; after packets, it names the current
// file with the size and SHA-256 of what is on disk, which the chain then
// vouches for.
func TestCheckpointNamesTheCurrentFile(t *testing.T) {
	dir := t.TempDir()
	files := testFiles(t, dir)
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	nop := func(string, map[string]string) error { return nil }
	if attrs, err := tp.Checkpoint(nop); attrs != nil || err != nil {
		t.Errorf("checkpoint before any file: attributes %v, err %v; want none", attrs, err)
	}
	for i := range 3 {
		files.write(&packet{ts: time.Unix(1700000000+int64(i), 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 100), length: 100})
	}
	attrs, err := tp.Checkpoint(nop)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName(1)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	want := map[string]string{vocab.AttrPcapFile: FileName(1), vocab.AttrPcapSize: strconv.Itoa(len(b)), vocab.AttrPcapSHA256: hex.EncodeToString(sum[:])}
	if len(b) == 0 || len(attrs) != len(want) {
		t.Fatalf("checkpoint attributes %v for a file of %d bytes, want %v", attrs, len(b), want)
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("checkpoint %s = %q, want %q", k, attrs[k], v)
		}
	}
	files.Finish()
}

// TestCheckpointEmitErrorIsReturned: a file record the chain refuses at
// a checkpoint is the checkpoint's error, not a checkpoint that claims the
// current file as if its predecessor were recorded.
func TestCheckpointEmitErrorIsReturned(t *testing.T) {
	files := testFiles(t, t.TempDir())
	files.Limits = Limits{RotateBytes: 1000, Files: DefaultFiles}
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	for i := range 10 { // 100 bytes each: the first file is finished
		files.write(&packet{ts: time.Unix(1700000000+int64(i), 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 100), length: 100})
	}
	refused := errors.New("the chain refused the record")
	attrs, err := tp.Checkpoint(func(typ string, _ map[string]string) error {
		if typ == vocab.TypePcapFile {
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) || attrs != nil {
		t.Errorf("checkpoint with the file record refused: attributes %v, err %v; want none and the refusal", attrs, err)
	}
	files.Finish()
}

// TestEveryLowWindowIsEmitted: the windows of a flapping volume that
// ended since the last checkpoint are each a pcap-disk-low gap record at
// the next one, none dropped after the first; a gap the chain refuses is
// the checkpoint's error.
func TestEveryLowWindowIsEmitted(t *testing.T) {
	gate := &switchGate{}
	files := testFiles(t, t.TempDir())
	files.Gate = gate
	tp := newTap(idleEngine{}, files, func() {})
	tp.Start()
	const windows = 3
	for i := range windows {
		for _, s := range []recorder.Storing{recorder.StoreDiskLow, recorder.StoreOK} {
			gate.set(s)
			files.write(&packet{ts: time.Unix(1700000000+int64(i), 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
		}
	}
	var gaps int
	if _, err := tp.Checkpoint(func(typ string, a map[string]string) error {
		if typ == vocab.TypeGap && a[vocab.AttrReason] == vocab.GapPcapDiskLow {
			gaps++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if gaps != windows {
		t.Errorf("%d disk-low gaps at the checkpoint, want %d", gaps, windows)
	}

	gate.set(recorder.StoreDiskLow)
	files.write(&packet{ts: time.Unix(1700000100, 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
	gate.set(recorder.StoreOK)
	files.write(&packet{ts: time.Unix(1700000101, 0), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
	refused := errors.New("the chain refused the gap")
	if _, err := tp.Checkpoint(func(typ string, _ map[string]string) error {
		if typ == vocab.TypeGap {
			return refused
		}
		return nil
	}); !errors.Is(err, refused) {
		t.Errorf("checkpoint with the gap refused: err %v, want the refusal", err)
	}
	files.Finish()
}
