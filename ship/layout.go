package ship

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// The bucket's layout (docs/OPERATING.md, "Shipping"), under Prefix:
//
//	segments/<run>/<session>/<file>/<part>  each segment as it was shipped
//	sessions/<run>/<session>/<file>         each file whole, once sealed
//	lab/<folder>/<first seen>-<inode>/<part> and .../whole, the lab-wide logs (rootlogs_linux.go)
//
// <file> is the path in the session folder (pty/typescript,
// pcap/00000001.pcapng, SHA256SUMS); <part> its segment's number, from 1,
// eight digits, so that a listing is in the file's order. A segment is an
// object of its own, not a part of a multipart upload: S3 takes no part
// under 5 MiB but the last, and a checkpoint's segment is often a few
// bytes; as an object it is visible, checked and locked the moment it
// lands. The two trees apart let `aws s3 cp --recursive` of a session's
// sessions/ prefix give back the folder as the sidecar wrote it.
const (
	segmentsTree = "segments/"
	sessionsTree = "sessions/"
	rootLogsTree = "lab/"
	wholeName    = "whole"
	partDigits   = 8
	// maxPart is the highest part number the layout holds.
	maxPart = 99999999
)

// sessionPrefix is the key prefix of one session's objects in tree.
func sessionPrefix(prefix, tree, run, session string) string {
	return prefix + tree + run + "/" + session + "/"
}

// segmentKey names part of the session file rel.
func segmentKey(prefix, run, session, rel string, part int) string {
	return fmt.Sprintf("%s%s/%0*d", sessionPrefix(prefix, segmentsTree, run, session), rel, partDigits, part)
}

// wholeKey names the session file rel, whole.
func wholeKey(prefix, run, session, rel string) string {
	return sessionPrefix(prefix, sessionsTree, run, session) + rel
}

// parseSegmentRel splits the rest of a segment key (after its session's
// prefix) into the file and the part number, refusing what the shipper
// never writes.
func parseSegmentRel(rest string) (rel string, part int, err error) {
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || len(rest)-i-1 != partDigits {
		return "", 0, fmt.Errorf("segment key %q: want <file>/<%d-digit part>", rest, partDigits)
	}
	rel = rest[:i]
	part, err = strconv.Atoi(rest[i+1:])
	if err != nil || part < 1 {
		return "", 0, fmt.Errorf("segment key %q: part is no number from 1", rest)
	}
	if err := checkRel(rel); err != nil {
		return "", 0, err
	}
	return rel, part, nil
}

// parseWholeKey splits a key of the sessions tree into run, session and
// file, refusing what the shipper never writes.
func parseWholeKey(prefix, key string) (run, session, rel string, err error) {
	rest, ok := strings.CutPrefix(key, prefix+sessionsTree)
	if !ok {
		return "", "", "", fmt.Errorf("key %q is outside %s%s", key, prefix, sessionsTree)
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) != 3 || !vocab.ValidID(parts[0]) || !vocab.ValidID(parts[1]) {
		return "", "", "", fmt.Errorf("key %q: want %s<run>/<session>/<file>", key, sessionsTree)
	}
	if err := checkRel(parts[2]); err != nil {
		return "", "", "", err
	}
	return parts[0], parts[1], parts[2], nil
}

// checkRel holds a file's path in the session folder to the shapes a
// session has: a manifest file at the top, or a file one folder down.
func checkRel(rel string) error {
	if rel == vocab.ManifestFile || rel == vocab.ManifestSigFile {
		return nil
	}
	dir, name, ok := strings.Cut(rel, "/")
	if !ok || dir == "" || name == "" || strings.Contains(name, "/") || dir == "." || dir == ".." || name == "." || name == ".." {
		return fmt.Errorf("file %q: want <folder>/<name> or a manifest file", rel)
	}
	return nil
}
