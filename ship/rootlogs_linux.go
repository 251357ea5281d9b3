package ship

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
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
// a rotation keeps and a name does not, and by its first bytes, since a
// removed file's inode is soon another's; its objects are named by when
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
	// RootLogInterval is how often the lab-wide logs are looked at.
	RootLogInterval = 5 * time.Second
	// maxRootLogFiles bounds the files of one lab-wide folder shipped.
	maxRootLogFiles = 256
	// identityBytes is how much of a file's start tells it from another
	// that had its inode: an audit record's first line, with its time
	// and serial, is unique.
	identityBytes = 256
)

// rootLogFolders are the lab-wide folders and each one's live file.
var rootLogFolders = []struct{ dir, live string }{
	{vocab.AuditRootDir, vocab.AuditLogFile},
	{vocab.ProcAcctDir, vocab.ProcAcctFile},
}

// rootLog is a lab-wide log file known by its inode and first bytes.
type rootLog struct {
	base  string // its objects' key prefix, ending in "/"
	ship  fileShip
	head  [sha256.Size]byte // SHA-256 of its first headN bytes
	headN int64             // identityBytes, or fewer while the file is shorter
	whole bool              // shipped whole, after its rotation
	seen  bool              // seen in the latest look
}

// labBase is what the bucket holds of one lab-wide file.
type labBase struct {
	ship  fileShip
	first int64 // the first segment's size
	holed bool
	whole bool
}

// RootLogs ships the lab-wide logs of a capture root, one look at a time.
type RootLogs struct {
	s      *Shipper
	root   string
	known  map[string]map[uint64]*rootLog
	remote map[string]map[string]*labBase
}

// RootLogs starts the shipping of root's lab-wide logs: Look ships what
// is new, each RootLogInterval, and once more at the stop.
func (s *Shipper) RootLogs(root string) *RootLogs {
	return &RootLogs{s: s, root: root, known: map[string]map[uint64]*rootLog{}, remote: map[string]map[string]*labBase{}}
}

// Look ships every lab-wide file's new bytes, and a rotated file whole;
// it returns early, with ctx's error, when ctx ends.
func (r *RootLogs) Look(ctx context.Context) error {
	for _, f := range rootLogFolders {
		if r.known[f.dir] == nil {
			// The objects of earlier runs, once per start, folded as
			// they are listed: a file seen again goes on where they end.
			bases, err := r.s.foldLabBases(ctx, r.s.st.cfg.Prefix+rootLogsTree+f.dir+"/")
			if err != nil {
				return err
			}
			r.known[f.dir], r.remote[f.dir] = map[uint64]*rootLog{}, bases
		}
		if err := r.s.shipRootDir(ctx, r.root, f.dir, f.live, r.known[f.dir], r.remote[f.dir]); err != nil {
			return err
		}
	}
	return nil
}

// foldLabBases is how far each lab-wide file's objects under prefix reach.
func (s *Shipper) foldLabBases(ctx context.Context, prefix string) (map[string]*labBase, error) {
	out := map[string]*labBase{}
	err := s.eachObject(ctx, prefix, func(rest string, size int64) error {
		base, leaf, ok := strings.Cut(rest, "/")
		if !ok {
			return nil
		}
		b := out[base]
		if b == nil {
			if len(out) == maxResumeUploads {
				return nil
			}
			b = &labBase{ship: fileShip{next: 1}}
			out[base] = b
		}
		if leaf == wholeName {
			b.whole = true
			return nil
		}
		part, err := strconv.Atoi(leaf)
		if err != nil || len(leaf) != partDigits || b.holed {
			return nil
		}
		if part == 1 && b.ship.next == 1 {
			b.first = size
		}
		b.holed = !b.ship.extend(part, size)
		return nil
	})
	return out, err
}

// shipRootDir looks at the folder dir of root once: every file's new
// bytes go as segments; a file no longer named liveName (rotated) goes
// whole once its segments are shipped.
func (s *Shipper) shipRootDir(ctx context.Context, root, dir, liveName string, known map[uint64]*rootLog, remote map[string]*labBase) error {
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
		ino, size, err := inode(root, rel)
		if err != nil {
			continue // rotated away meanwhile: the next look
		}
		l := known[ino]
		if l != nil {
			// The inode of a removed file is soon another's: it is the
			// same file only if no shorter than what was shipped of it
			// and beginning with the same bytes.
			head, n, err := prefixDigest(root, rel, l.headN)
			if err != nil || size < l.ship.off || n != l.headN || head != l.head {
				l = nil
			}
		}
		if l == nil {
			l = s.adoptRootLog(ctx, root, rel, dir, ino, remote)
			known[ino] = l
		}
		l.seen = true
		if l.headN < identityBytes {
			if l.head, l.headN, err = prefixDigest(root, rel, identityBytes); err != nil {
				continue
			}
		}
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

// inode opens the lab-wide file rel of root through no link and gives its
// inode and size.
func inode(root, rel string) (uint64, int64, error) {
	f, size, err := safefs.OpenRegular(root, rel)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("ship: %s: no inode", rel)
	}
	return st.Ino, size, nil
}

// prefixDigest is the SHA-256 of the first n bytes of the lab-wide file
// rel (fewer, and how many, where it is shorter).
func prefixDigest(root, rel string, n int64) (sum [sha256.Size]byte, got int64, err error) {
	f, size, err := safefs.OpenRegular(root, rel)
	if err != nil {
		return sum, 0, err
	}
	defer f.Close()
	h := sha256.New()
	got, err = io.Copy(h, io.NewSectionReader(f, 0, min(size, n)))
	h.Sum(sum[:0])
	return sum, got, err
}

// adoptRootLog is the state of a file first seen now: where the objects of
// an earlier run end, if some hold its first bytes, else new objects.
func (s *Shipper) adoptRootLog(ctx context.Context, root, rel, dir string, ino uint64, remote map[string]*labBase) *rootLog {
	suffix := "-" + strconv.FormatUint(ino, 10)
	prefix := s.st.cfg.Prefix + rootLogsTree + dir + "/"
	once := &Shipper{st: s.st, log: s.log, once: true}
	for base, b := range remote {
		if !strings.HasSuffix(base, suffix) || b.ship.next == 1 {
			continue
		}
		// The first segment holds the file's first bytes, by the
		// store's checksum, or this is another file that had the inode.
		raw, err := once.headChecksum(ctx, fmt.Sprintf("%s%s/%0*d", prefix, base, partDigits, 1))
		if err != nil {
			continue
		}
		sec, err := openSection(root, rel, 0, b.first)
		if err != nil {
			continue
		}
		sec.close()
		if !bytes.Equal(raw, sec.sum[:]) {
			continue
		}
		delete(remote, base) // one file's, once
		return &rootLog{base: prefix + base + "/", ship: b.ship, whole: b.whole}
	}
	stamp := s.st.now().UTC().Format("20060102T150405.000000000Z")
	return &rootLog{base: prefix + stamp + suffix + "/", ship: fileShip{next: 1}}
}
