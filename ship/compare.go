package ship

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// What verify --shipped finds comparing a local session folder with its
// objects (docs/EXAMINER.md, "A session in the bucket").
const (
	// FindingMissingPart: a segment absent from the bucket, whether a
	// hole among a file's parts or one the chain records as shipped.
	FindingMissingPart = "missing-part"
	// FindingWrongDigest: an object whose SHA-256 (the store's checksum
	// of a segment, the bytes of a whole file) differs from the local
	// bytes at its place, or from what the chain's shipped record says.
	FindingWrongDigest = "wrong-digest"
	// FindingExtraBytes: objects past a local file's end, or of a file the
	// local folder does not have.
	FindingExtraBytes = "extra-bytes"
	// FindingUnshipped: local bytes no segment holds yet (the tail of a
	// session still running, or one whose shipping a stop cut).
	FindingUnshipped = "unshipped"
	// FindingMissingObject: a sealed session's file that the bucket does
	// not hold whole.
	FindingMissingObject = "missing-object"
	// FindingMalformedRecord: a shipped record of the chain whose numbers
	// do not parse, so that nothing holds it to the bucket.
	FindingMalformedRecord = "malformed-record"
	// FindingStoreUnreadable: the store did not answer a question the
	// comparison asked; what it would have shown is not known.
	FindingStoreUnreadable = "store-unreadable"
)

// Finding is one difference between the local folder and the bucket.
type Finding struct {
	Kind   string `json:"kind"`
	File   string `json:"file"`
	Part   int    `json:"part,omitempty"`
	Detail string `json:"detail"`
}

// Comparison is what verify --shipped reports of a session.
type Comparison struct {
	Segments int       `json:"segments"`      // segment objects compared
	Whole    int       `json:"whole_objects"` // whole objects compared
	Claims   int       `json:"shipped_records"`
	Findings []Finding `json:"findings"`
}

// Compare holds the local session folder dir (of run and session) to its
// objects in the bucket of cfg: every segment's checksum to the local
// bytes at its place, the parts of each file without a hole, the chain's
// shipped records (claims, from evidence.Verify) to the segments, and,
// for a sealed session, every file to its whole object. The local folder
// is read as hostile, as verify reads it.
//
// recorded is how many shipped records the chain holds (Report's
// ShippedSegments): more than claims is records no comparison can hold to
// the bucket, a finding too.
func Compare(ctx context.Context, cfg Config, dir, run, session string, claims []evidence.ShippedPart, recorded int) (Comparison, error) {
	st, err := newStore(ctx, cfg)
	if err != nil {
		return Comparison{}, err
	}
	// The comparison makes its requests once each: an examiner's command
	// reports the store's error rather than wait out an outage.
	sh := &Shipper{st: st, log: slog.New(slog.DiscardHandler), once: true}
	c := &comparison{sh: sh, dir: dir}
	files, _, err := listSession(dir)
	if err != nil {
		return Comparison{}, err
	}
	segs, err := sh.listSizes(ctx, sessionPrefix(cfg.Prefix, segmentsTree, run, session), maxListedObjects)
	if err != nil {
		return Comparison{}, err
	}
	whole, err := sh.listSizes(ctx, sessionPrefix(cfg.Prefix, sessionsTree, run, session), 2*vocab.ManifestMaxFiles)
	if err != nil {
		return Comparison{}, err
	}
	local := map[string]int64{}
	sealedFolder := false
	for _, f := range files {
		local[f.rel] = f.size
		sealedFolder = sealedFolder || f.rel == vocab.ManifestFile
	}
	byFile := map[string]map[int]int64{}
	for rest, n := range segs {
		rel, part, err := parseSegmentRel(rest)
		if err != nil {
			c.add(FindingExtraBytes, rest, 0, "an object of the session's segments the shipper never names so")
			continue
		}
		if byFile[rel] == nil {
			byFile[rel] = map[int]int64{}
		}
		byFile[rel][part] = n
	}
	placed := map[string]map[int]placedPart{}
	for _, f := range files {
		placed[f.rel] = c.segments(ctx, cfg, run, session, f, byFile[f.rel])
	}
	for rel := range byFile {
		if _, ok := local[rel]; !ok {
			c.add(FindingExtraBytes, rel, 0, "segments of a file the local folder does not have")
		}
	}
	c.claims(claims, placed)
	if n := recorded - len(claims); n > 0 {
		c.add(FindingMalformedRecord, vocab.PTYDir+"/"+vocab.LogFile, 0, "%d shipped records of the chain do not parse; they are held to nothing", n)
	}
	for _, f := range files {
		c.whole(ctx, cfg, run, session, f, whole, sealedFolder)
	}
	for rel := range whole {
		if _, ok := local[rel]; !ok {
			c.add(FindingExtraBytes, rel, 0, "a whole object of a file the local folder does not have")
		}
	}
	c.out.Claims = len(claims)
	slices.SortStableFunc(c.out.Findings, func(a, b Finding) int {
		if a.File != b.File {
			if a.File < b.File {
				return -1
			}
			return 1
		}
		return a.Part - b.Part
	})
	return c.out, nil
}

type comparison struct {
	sh  *Shipper
	dir string
	out Comparison
}

// placedPart is a segment found in the bucket: where it lies, and its
// store's checksum (hex SHA-256).
type placedPart struct {
	off, n int64
	sha256 string
	unread bool // the store did not give its checksum
}

func (c *comparison) add(kind, file string, part int, format string, args ...any) {
	c.out.Findings = append(c.out.Findings, Finding{Kind: kind, File: file, Part: part, Detail: fmt.Sprintf(format, args...)})
}

// segments compares the file f's segment objects (part → size) with its
// local bytes, and returns where each lies.
func (c *comparison) segments(ctx context.Context, cfg Config, run, session string, f localFile, parts map[int]int64) map[int]placedPart {
	placed := map[int]placedPart{}
	nums := slices.Sorted(func(yield func(int) bool) {
		for n := range parts {
			if !yield(n) {
				return
			}
		}
	})
	var off int64
	next := 1
	for _, num := range nums {
		if num != next {
			c.add(FindingMissingPart, f.rel, next, "parts %d to %d are not in the bucket; the offsets of the later parts are not known", next, num-1)
			break
		}
		n := parts[num]
		next++
		c.out.Segments++
		key := segmentKey(cfg.Prefix, run, session, f.rel, num)
		raw, err := c.sh.headChecksum(ctx, key)
		remote := hex.EncodeToString(raw)
		placed[num] = placedPart{off: off, n: n, sha256: remote, unread: err != nil}
		if err != nil {
			// The object is listed: where it lies is known, what it
			// holds is not.
			c.add(FindingStoreUnreadable, f.rel, num, "the store gives no SHA-256 checksum of the segment: %s", describe(err))
			off += n
			continue
		}
		if off+n > f.size {
			c.add(FindingExtraBytes, f.rel, num, "the part reaches byte %d; the local file has %d", off+n, f.size)
			off += n
			continue
		}
		sec, err := openSection(c.dir, f.rel, off, n)
		if err != nil {
			c.add(FindingWrongDigest, f.rel, num, "the local bytes cannot be read: %v", err)
		} else {
			sec.close()
			if local := hex.EncodeToString(sec.sum[:]); local != remote {
				c.add(FindingWrongDigest, f.rel, num, "the object's SHA-256 %s differs from the local bytes' %s at %d+%d", remote, local, off, n)
			}
		}
		off += n
	}
	if next > len(nums) && off < f.size {
		c.add(FindingUnshipped, f.rel, 0, "bytes %d to %d are in no segment", off, f.size)
	}
	return placed
}

// claims holds each shipped record of the chain to the segment it names.
func (c *comparison) claims(claims []evidence.ShippedPart, placed map[string]map[int]placedPart) {
	for _, cl := range claims {
		p, ok := placed[cl.File][cl.Part]
		switch {
		case !ok:
			c.add(FindingMissingPart, cl.File, cl.Part, "the chain records this segment as shipped (record %d); the bucket does not hold it", cl.Seq)
		case p.off != cl.Offset || p.n != cl.Length:
			c.add(FindingWrongDigest, cl.File, cl.Part, "the chain records bytes %d+%d (record %d); the bucket's part holds %d+%d", cl.Offset, cl.Length, cl.Seq, p.off, p.n)
		case !p.unread && p.sha256 != cl.SHA256:
			c.add(FindingWrongDigest, cl.File, cl.Part, "the chain records SHA-256 %s (record %d); the object's is %s", cl.SHA256, cl.Seq, p.sha256)
		}
	}
}

// whole compares the file f with its whole object, by downloading it.
func (c *comparison) whole(ctx context.Context, cfg Config, run, session string, f localFile, whole map[string]int64, sealedFolder bool) {
	n, ok := whole[f.rel]
	if !ok {
		if sealedFolder {
			c.add(FindingMissingObject, f.rel, 0, "the session is sealed; the bucket does not hold this file whole")
		}
		return
	}
	c.out.Whole++
	if n != f.size {
		c.add(FindingWrongDigest, f.rel, 0, "the whole object has %d bytes; the local file %d", n, f.size)
		return
	}
	remote, err := c.sh.getDigest(ctx, wholeKey(cfg.Prefix, run, session, f.rel), f.size)
	if err != nil {
		c.add(FindingStoreUnreadable, f.rel, 0, "the whole object cannot be read: %s", describe(err))
		return
	}
	sec, err := openSection(c.dir, f.rel, 0, f.size)
	if err != nil {
		c.add(FindingWrongDigest, f.rel, 0, "the local file cannot be read: %v", err)
		return
	}
	sec.close()
	if local := hex.EncodeToString(sec.sum[:]); local != remote {
		c.add(FindingWrongDigest, f.rel, 0, "the whole object's SHA-256 %s differs from the local file's %s", remote, local)
	}
}

// headChecksum is the store's SHA-256 checksum of an object.
func (s *Shipper) headChecksum(ctx context.Context, key string) ([]byte, error) {
	var sum []byte
	err := s.retry(ctx, "head-object", key, func(ctx context.Context) error {
		out, err := s.st.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled})
		if err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(aws.ToString(out.ChecksumSHA256))
		if err != nil || len(raw) != sha256.Size {
			return fmt.Errorf("%q is no SHA-256 checksum", aws.ToString(out.ChecksumSHA256))
		}
		sum = raw
		return nil
	})
	return sum, err
}

// getDigest downloads an object of size bytes and returns its SHA-256 in
// hex, reading no more than size+1 bytes of it, within requestTimeout and
// a second per MiB: a store that stalls the body does not hang verify.
func (s *Shipper) getDigest(ctx context.Context, key string, size int64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout+time.Duration(size>>20)*time.Second)
	defer cancel()
	out, err := s.st.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key)})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(out.Body, size+1))
	if err != nil {
		return "", err
	}
	if n != size {
		return "", fmt.Errorf("%d bytes read, not %d", n, size)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
