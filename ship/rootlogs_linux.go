package ship

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The capture root's lab-wide logs (_audit/audit.log, _proc-acct/
// proc-acct.log and their rotations, auditd's way: name becomes name.1,
// name.1 name.2, the oldest removed) are shipped the same way as a
// session's files, without a chain (they have none: the signed evidence
// is each session's own audit folder). A file is known by its inode, which
// a rotation keeps and a name does not, and its objects are named by when
// the shipper first saw it and that inode:
//
//	lab/<folder>/<first seen, UTC>-<inode>/<part>   its segments, as they were shipped
//	lab/<folder>/<first seen, UTC>-<inode>/whole     the file whole, once rotated
//
// A start finds the objects of a file it sees again (the same inode, its
// first segment holding the file's first bytes) and goes on from where
// they end. What a file gained after the last look before the oldest
// rotation removed it is lost to the bucket, as it is to the volume; the
// look is every RootLogInterval, and a rotation keeps several files.
const (
	rootLogsTree = "lab/"
	wholeName    = "whole"
	// RootLogInterval is how often the lab-wide logs are looked at.
	RootLogInterval = 5 * time.Second
	// maxRootLogFiles bounds the files of one lab-wide folder shipped.
	maxRootLogFiles = 256
)

// rootLog is a lab-wide log file known by its inode.
type rootLog struct {
	base  string // its objects' key prefix, ending in "/"
	ship  fileShip
	whole bool // shipped whole, after its rotation
	seen  bool // seen in the latest look
}

// rootLogFolders are the lab-wide folders and each one's live file.
var rootLogFolders = []struct{ dir, live string }{
	{vocab.AuditRootDir, vocab.AuditLogFile},
	{vocab.ProcAcctDir, vocab.ProcAcctFile},
}

// RootLogs ships the lab-wide logs of a capture root, one look at a time.
type RootLogs struct {
	s      *Shipper
	root   string
	known  map[string]map[uint64]*rootLog
	remote map[string]map[string]int64
}

// RootLogs starts the shipping of root's lab-wide logs: Look ships what
// is new, each RootLogInterval, and once more at the stop.
func (s *Shipper) RootLogs(root string) *RootLogs {
	return &RootLogs{s: s, root: root, known: map[string]map[uint64]*rootLog{}, remote: map[string]map[string]int64{}}
}

// Look ships every lab-wide file's new bytes, and a rotated file whole;
// it returns early, with ctx's error, when ctx ends.
func (r *RootLogs) Look(ctx context.Context) error {
	for _, f := range rootLogFolders {
		if r.known[f.dir] == nil {
			// The objects of earlier runs, once per start: a file seen
			// again goes on where they end.
			sizes, err := r.s.listSizes(ctx, r.s.st.cfg.Prefix+rootLogsTree+f.dir+"/")
			if err != nil {
				return err
			}
			r.known[f.dir], r.remote[f.dir] = map[uint64]*rootLog{}, sizes
		}
		if err := r.s.shipRootDir(ctx, r.root, f.dir, f.live, r.known[f.dir], r.remote[f.dir]); err != nil {
			return err
		}
	}
	return nil
}

// shipRootDir looks at the folder dir of root once: every file's new
// bytes go as segments; a file no longer named liveName (rotated) goes
// whole once its segments are shipped.
func (s *Shipper) shipRootDir(ctx context.Context, root, dir, liveName string, known map[uint64]*rootLog, remote map[string]int64) error {
	entries, err := listFolder(filepath.Join(root, dir))
	if err != nil {
		return nil // not made yet, or not a folder: the witness says why
	}
	for _, l := range known {
		l.seen = false
	}
	for i, e := range entries {
		if i == maxRootLogFiles {
			s.log.Warn("ship: more lab-wide log files than shipped", "folder", dir, "shipped", maxRootLogFiles)
			break
		}
		rel := dir + "/" + e.Name()
		f, size, err := safefs.OpenRegular(root, rel)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		f.Close()
		st, ok := fi.Sys().(*syscall.Stat_t)
		if err != nil || !ok {
			continue
		}
		l := known[st.Ino]
		if l == nil {
			l = s.adoptRootLog(ctx, root, rel, dir, st.Ino, remote)
			known[st.Ino] = l
		}
		l.seen = true
		for l.ship.off < size {
			n := min(size-l.ship.off, MaxSegment)
			key := fmt.Sprintf("%s%0*d", l.base, partDigits, l.ship.next)
			if _, _, err := s.putSection(ctx, root, rel, l.ship.off, n, key); err != nil {
				if isLocal(err) {
					break // rotated away or removed meanwhile: the next look
				}
				return err
			}
			l.ship.off += n
			l.ship.next++
		}
		if e.Name() != liveName && !l.whole && l.ship.off == size {
			err := s.putWhole(ctx, root, localFile{rel: rel, size: size}, l.base+wholeName)
			if err != nil && !isLocal(err) {
				return err
			}
			l.whole = err == nil
		}
	}
	for ino, l := range known {
		if !l.seen {
			delete(known, ino) // removed by the rotation
		}
	}
	return nil
}

// adoptRootLog is the state of a file first seen now: where the objects of
// an earlier run end, if some hold its first bytes, else new objects.
func (s *Shipper) adoptRootLog(ctx context.Context, root, rel, dir string, ino uint64, remote map[string]int64) *rootLog {
	suffix := "-" + strconv.FormatUint(ino, 10)
	bases := map[string]map[int]int64{}
	for rest, n := range remote {
		base, leaf, ok := strings.Cut(rest, "/")
		if !ok || !strings.HasSuffix(base, suffix) {
			continue
		}
		if bases[base] == nil {
			bases[base] = map[int]int64{}
		}
		if part, err := strconv.Atoi(leaf); err == nil && len(leaf) == partDigits {
			bases[base][part] = n
		} else if leaf == wholeName {
			bases[base][0] = n
		}
	}
	prefix := s.st.cfg.Prefix + rootLogsTree + dir + "/"
	for base, parts := range bases {
		first, ok := parts[1]
		if !ok {
			continue
		}
		sec, err := openSection(root, rel, 0, first)
		if err != nil {
			continue
		}
		sec.close()
		once := &Shipper{st: s.st, log: s.log, once: true}
		raw, err := once.headChecksum(ctx, fmt.Sprintf("%s%s/%0*d", prefix, base, partDigits, 1))
		if err != nil || !bytes.Equal(raw, sec.sum[:]) {
			continue // another file that had the inode once
		}
		l := &rootLog{base: prefix + base + "/", ship: fileShip{next: 1}}
		for n, ok := parts[l.ship.next]; ok; n, ok = parts[l.ship.next] {
			l.ship.off += n
			l.ship.next++
		}
		_, l.whole = parts[0]
		return l
	}
	stamp := s.st.now().UTC().Format("20060102T150405.000000000Z")
	return &rootLog{base: prefix + stamp + suffix + "/", ship: fileShip{next: 1}}
}
