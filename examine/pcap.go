package examine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"

	"github.com/google/gopacket/pcapgo"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The packet witness's files (<session>/pcap/capture-NNNNNN.pcapng) are
// checked against the records a trusted signature covers: each finished
// file's pcap-file record (size, SHA-256, packet count), the last signed
// checkpoint's current file (a prefix, for a session that did not close),
// and the close record's file count. A file that is missing, shorter
// (truncated), longer, different, or not named by any signed record
// (extra) is an anomaly; packets the kernel dropped, or that rotation did
// not store, are gaps (the witness's gap records). The files are hostile
// like every other: opened with OpenRegular, read no further than the
// records claim, and parsed only once their digest matched.

// PcapReport is what the record says of the session's packet capture.
type PcapReport struct {
	State   string `json:"state"` // on, unavailable, disabled
	Reason  string `json:"reason,omitempty"`
	Files   int    `json:"files"`   // finished files a signed record vouches for
	Packets int64  `json:"packets"` // packets in them
}

// pcapFileName is the only form of name the sidecar gives a pcap file.
var pcapFileName = regexp.MustCompile(`^capture-[0-9]{6}\.pcapng$`)

// maxPcapEntries bounds the listing of a hostile pcap folder.
const maxPcapEntries = 100000

// pcapEvidence is what the replay collected about the pcap files.
type pcapEvidence struct {
	files       []pcapClaim // pcap-file records, in order
	checkpoints []pcapClaim // checkpoints' current file, in order
	closeFiles  string      // the close record's pcap_files
	closed      bool
}

// pcapClaim is a record's claim about one file.
type pcapClaim struct {
	seq           int64
	name, sha256  string
	size, packets int64
}

// notePcap collects a record's claims about pcap files, before its
// signature is known; checkPcap uses only those a signature covers.
func (v *verifier) notePcap(r *integrity.Record, seq int64) {
	switch r.Type {
	case vocab.TypeOpen:
		if st := r.Attrs[vocab.AttrPcap]; st != "" {
			v.rep.Pcap = &PcapReport{State: st, Reason: r.Attrs[vocab.AttrPcapReason]}
		}
	case vocab.TypePcapFile:
		size, err1 := strconv.ParseInt(r.Attrs[vocab.AttrBytes], 10, 64)
		packets, err2 := strconv.ParseInt(r.Attrs[vocab.AttrPackets], 10, 64)
		if err1 != nil || err2 != nil || size < 0 || packets < 0 {
			v.anomaly(KindRecordMalformed, vocab.LogFile, seq, -1, "pcap-file record without a plausible size or packet count")
			size = -1
		}
		v.pcap.files = append(v.pcap.files, pcapClaim{seq: seq, name: r.Attrs[vocab.AttrFile], sha256: r.Attrs[vocab.AttrSHA256], size: size, packets: packets})
	case vocab.TypeCheckpoint:
		if name := r.Attrs[vocab.AttrPcapFile]; name != "" {
			size, err := strconv.ParseInt(r.Attrs[vocab.AttrPcapSize], 10, 64)
			if err != nil || size < 0 {
				size = -1
			}
			v.pcap.checkpoints = append(v.pcap.checkpoints, pcapClaim{seq: seq, name: name, sha256: r.Attrs[vocab.AttrPcapSHA256], size: size})
		}
	case vocab.TypeClose:
		v.pcap.closed = true
		v.pcap.closeFiles = r.Attrs[vocab.AttrPcapFiles]
	case vocab.TypeGap:
		if r.Attrs[vocab.AttrStream] == vocab.StreamPcap {
			n, _ := strconv.ParseInt(r.Attrs[vocab.AttrCount], 10, 64)
			v.pcapGaps = append(v.pcapGaps, Gap{Seq: seq, Reason: r.Attrs[vocab.AttrReason], Stream: vocab.StreamPcap, Count: n})
		}
	}
}

// checkPcap checks the pcap folder against the signed claims.
func (v *verifier) checkPcap() {
	v.fillPcapGaps()
	signed := func(c pcapClaim) bool { return c.seq <= v.rep.LastVerifiedSeq }
	expected := map[string]pcapClaim{}
	for _, c := range v.pcap.files {
		if !signed(c) {
			continue
		}
		if !pcapFileName.MatchString(c.name) {
			v.anomaly(KindRecordMalformed, vocab.LogFile, c.seq, -1, "pcap-file record names %q, not a pcap file name", c.name)
			continue
		}
		expected[c.name] = c
	}
	var current *pcapClaim
	for i := range v.pcap.checkpoints {
		if c := v.pcap.checkpoints[i]; signed(c) && pcapFileName.MatchString(c.name) {
			current = &v.pcap.checkpoints[i]
		}
	}
	if current != nil {
		if _, finished := expected[current.name]; finished {
			current = nil
		}
	}
	if v.rep.Pcap == nil && len(expected) == 0 && current == nil {
		v.noExtraPcap(nil, nil)
		return
	}
	if v.rep.Pcap == nil {
		v.rep.Pcap = &PcapReport{}
	}
	names := make([]string, 0, len(expected))
	for name := range expected {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if v.checkPcapFile(expected[name]) {
			v.rep.Pcap.Files++
			v.rep.Pcap.Packets += expected[name].packets
		}
	}
	if current != nil {
		v.checkPcapPrefix(*current)
	}
	v.checkPcapCount(len(expected))
	v.noExtraPcap(expected, current)
}

// fillPcapGaps states the witness's gaps among the report's gaps, with
// their packet counts.
func (v *verifier) fillPcapGaps() {
	for _, g := range v.pcapGaps {
		for i := range v.rep.Gaps {
			if v.rep.Gaps[i].Seq == g.Seq {
				v.rep.Gaps[i] = g
			}
		}
	}
}

// checkPcapCount compares the close record's file count with the signed
// pcap-file records.
func (v *verifier) checkPcapCount(n int) {
	if !v.pcap.closed || v.pcap.closeFiles == "" || v.closeSeq > v.rep.LastVerifiedSeq {
		return
	}
	if v.pcap.closeFiles != strconv.Itoa(n) {
		v.anomaly(KindCountMismatch, vocab.LogFile, v.closeSeq, -1, "close record counts %s pcap files, the signed pcap-file records %d", v.pcap.closeFiles, n)
	}
}

func pcapRel(name string) string { return vocab.PcapDir + "/" + name }

// checkPcapFile checks one finished file; it reports whether it is intact.
func (v *verifier) checkPcapFile(c pcapClaim) bool {
	rel := pcapRel(c.name)
	f, size, err := OpenRegular(v.rep.Dir, rel)
	if errors.Is(err, fs.ErrNotExist) {
		v.anomaly(KindPcapMissing, rel, c.seq, -1, "missing: record %d vouches for this pcap file (%d bytes, %d packets)", c.seq, c.size, c.packets)
		return false
	}
	if err != nil {
		v.anomaly(KindFileUnreadable, rel, c.seq, -1, "%v", err)
		return false
	}
	defer f.Close()
	switch {
	case c.size < 0:
		return false
	case size < c.size:
		v.damage(KindFileTruncated, rel, c.seq, size, c.size, "file ends at %d, inside the %d bytes record %d vouches for (truncated)", size, c.size, c.seq)
		return false
	case size > c.size:
		v.damage(KindFileAppended, rel, c.seq, c.size, size, "file is %d bytes, record %d vouches for %d (bytes appended)", size, c.seq, c.size)
		return false
	}
	if !v.pcapDigest(f, c, rel) {
		return false
	}
	n, err := countPcapng(io.NewSectionReader(f, 0, c.size))
	if err != nil || n != c.packets {
		v.anomaly(KindCountMismatch, rel, c.seq, -1, "holds %d packets (%v), record %d counts %d", n, err, c.seq, c.packets)
		return false
	}
	return true
}

// checkPcapPrefix checks the file that was being written at the last
// signed checkpoint of a session that did not close.
func (v *verifier) checkPcapPrefix(c pcapClaim) {
	rel := pcapRel(c.name)
	f, size, err := OpenRegular(v.rep.Dir, rel)
	if err != nil {
		v.anomaly(KindFileUnreadable, rel, c.seq, -1, "the last signed checkpoint vouches for %d bytes of this pcap file: %v", c.size, err)
		return
	}
	defer f.Close()
	if c.size < 0 || size < c.size {
		v.damage(KindFileTruncated, rel, c.seq, size, c.size, "file ends at %d, inside the %d bytes checkpoint %d vouches for (truncated)", size, c.size, c.seq)
		return
	}
	v.pcapDigest(f, c, rel)
}

// pcapDigest compares the first c.size bytes of f with c's digest.
func (v *verifier) pcapDigest(f *os.File, c pcapClaim, rel string) bool {
	h := sha256.New()
	if n, _ := io.Copy(h, io.NewSectionReader(f, 0, c.size)); n != c.size || hex.EncodeToString(h.Sum(nil)) != c.sha256 {
		v.damage(KindFileDigestMismatch, rel, c.seq, 0, c.size, "bytes 0..%d differ from the digest record %d vouches for (altered)", c.size, c.seq)
		return false
	}
	return true
}

// countPcapng counts the packets of a pcapng file the sidecar wrote.
func countPcapng(r io.Reader) (int64, error) {
	ng, err := pcapgo.NewNgReader(r, pcapgo.NgReaderOptions{WantMixedLinkType: true})
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		_, _, err := ng.ZeroCopyReadPacketData()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}

// noExtraPcap reports every entry of the pcap folder that no signed
// record names: a file added after the fact, or one whose record was
// never signed. The folder itself must be a real directory.
func (v *verifier) noExtraPcap(expected map[string]pcapClaim, current *pcapClaim) {
	path := filepath.Join(v.rep.Dir, vocab.PcapDir)
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		v.anomaly(KindFileUnreadable, vocab.PcapDir, -1, -1, "%v", err)
		return
	case !fi.IsDir():
		v.anomaly(KindFileUnreadable, vocab.PcapDir, -1, -1, "%s", (&NotRegularError{Path: vocab.PcapDir, Kind: describeMode(fi.Mode())}).Error())
		return
	}
	d, err := os.Open(path)
	if err != nil {
		v.anomaly(KindFileUnreadable, vocab.PcapDir, -1, -1, "%v", err)
		return
	}
	defer d.Close()
	entries, err := d.ReadDir(maxPcapEntries + 1)
	if err != nil && err != io.EOF {
		v.anomaly(KindFileUnreadable, vocab.PcapDir, -1, -1, "%v", err)
	}
	if len(entries) > maxPcapEntries {
		v.anomaly(KindFileUnreadable, vocab.PcapDir, -1, -1, "more than %d entries; not listed further", maxPcapEntries)
		entries = entries[:maxPcapEntries]
	}
	for _, e := range entries {
		if _, ok := expected[e.Name()]; ok || (current != nil && current.name == e.Name()) {
			continue
		}
		v.anomaly(KindPcapExtra, pcapRel(e.Name()), -1, -1, "extra: no signed record vouches for this file")
	}
}
