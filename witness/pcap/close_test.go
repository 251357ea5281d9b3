package pcap

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/gopacket/layers"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// This file's name sorts before every other test file of the package
// whose tests close a session, on purpose: TestCloseWithoutAWriterReturns
// fails within its bound where a Close that waits for a writer that never
// ran would hang the tests after it.

// TestCloseWithoutAWriterReturns: a session that stored no packet through
// the queue (no writer ever ran) closes at once, with its close record.
func TestCloseWithoutAWriterReturns(t *testing.T) {
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	done := make(chan map[string]string, 1)
	go func() {
		attrs, _ := tp.Close(func(string, map[string]string) error { return nil })
		done <- attrs
	}()
	select {
	case attrs := <-done:
		if attrs[vocab.AttrPcapPackets] != "0" {
			t.Errorf("close attributes %v, want 0 packets", attrs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a session without a writer did not return")
	}
}

// dropsEngine is an idle engine whose kernel drop count the test sets.
type dropsEngine struct {
	idleEngine
	n *atomic.Uint64
}

func (e dropsEngine) drops() uint64 { return e.n.Load() }

// TestKernelDropsAreThoseOfTheWindow: the kernel's drop count is summed
// over the engine's life; a session's close record and its
// pcap-kernel-drops gap count the drops between its start and its close.
func TestKernelDropsAreThoseOfTheWindow(t *testing.T) {
	var n atomic.Uint64
	n.Store(5) // before the session
	tp := newTap(dropsEngine{n: &n}, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	n.Store(12)
	var gaps []map[string]string
	attrs, err := tp.Close(func(typ string, a map[string]string) error {
		if typ == vocab.TypeGap {
			gaps = append(gaps, a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if attrs[vocab.AttrPcapKernelDrops] != "7" {
		t.Errorf("close record kernel drops %q, want 7", attrs[vocab.AttrPcapKernelDrops])
	}
	if len(gaps) != 1 || gaps[0][vocab.AttrReason] != vocab.GapPcapKernelDrops || gaps[0][vocab.AttrCount] != "7" {
		t.Errorf("gaps %v, want one %s of 7", gaps, vocab.GapPcapKernelDrops)
	}
}

// TestCatchUpGapKeepsTheCloseRecord: a session closed before the ring
// caught up still returns its close record's totals after the
// pcap-catch-up-timeout gap, and an error emitting that gap is Close's.
func TestCatchUpGapKeepsTheCloseRecord(t *testing.T) {
	lag := laggingEngine{lag: 300 * time.Millisecond}
	tp := newTap(lag, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, 60), length: 60})
	var gaps int
	attrs, err := tp.Close(func(typ string, _ map[string]string) error {
		if typ == vocab.TypeGap {
			gaps++
		}
		return nil
	})
	if err != nil || gaps != 1 {
		t.Fatalf("close: %d gaps, err %v; want the catch-up gap", gaps, err)
	}
	if attrs[vocab.AttrPcapPackets] != "1" || attrs[vocab.AttrPcapFiles] != "1" {
		t.Errorf("close attributes %v, want 1 packet in 1 file", attrs)
	}

	tp = newTap(lag, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	refused := errors.New("the chain refused the gap")
	attrs, err = tp.Close(func(typ string, _ map[string]string) error {
		if typ == vocab.TypeGap {
			return refused
		}
		return nil
	})
	if !errors.Is(err, refused) || attrs != nil {
		t.Errorf("close with the gap refused: attributes %v, err %v; want none and the refusal", attrs, err)
	}
}

// TestTruncatedCountsOnlyCutPackets: the close record's pcap_truncated
// counts the packets cut at SnapLen (fewer bytes kept than the frame
// had), not those kept whole.
func TestTruncatedCountsOnlyCutPackets(t *testing.T) {
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	for _, p := range []struct{ kept, length int }{{60, 60}, {SnapLen, SnapLen + 100}, {10, 11}, {1514, 1514}, {0, 0}} {
		tp.deliver(&packet{ts: time.Now(), ifindex: 1, ifname: "lo", linkType: layers.LinkTypeEthernet, data: make([]byte, p.kept), length: p.length})
	}
	attrs, err := tp.Close(func(string, map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if attrs[vocab.AttrPcapTruncated] != "2" || attrs[vocab.AttrPcapPackets] != strconv.Itoa(5) {
		t.Errorf("close attributes %v, want 2 of 5 packets truncated", attrs)
	}
}

// TestCloseListsInterfacesInIndexOrder: the close record's
// pcap_interfaces lists each interface seen once, by index, whatever the
// order their packets came in, so the record reads the same for the same
// capture.
func TestCloseListsInterfacesInIndexOrder(t *testing.T) {
	tp := newTap(idleEngine{}, testFiles(t, t.TempDir()), func() {})
	tp.Start()
	for _, i := range []int{9, 2, 7, 2, 1, 12, 4} {
		tp.deliver(&packet{ts: time.Now(), ifindex: i, ifname: "if" + strconv.Itoa(i), linkType: layers.LinkTypeEthernet, data: make([]byte, 10), length: 10})
	}
	attrs, err := tp.Close(func(string, map[string]string) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	var listed []ifaceStats
	if err := json.Unmarshal([]byte(attrs[vocab.AttrPcapInterfaces]), &listed); err != nil {
		t.Fatal(err)
	}
	var order []int
	for _, st := range listed {
		order = append(order, st.Index)
	}
	if want := []int{1, 2, 4, 7, 9, 12}; !slices.Equal(order, want) {
		t.Errorf("interfaces listed %v, want %v", order, want)
	}
}
