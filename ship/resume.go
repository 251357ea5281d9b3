package ship

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/safefs"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// What a start does for the sessions before it (Resume): a crash, a stop
// that gave up waiting, or an outage longer than the sidecar ran leaves
// sessions partly shipped. The bucket itself is the ledger: a session is
// shipped when every file of its folder is in its sessions tree whole
// with the same size, each such object having been confirmed by its
// SHA-256 as it was written; any other is shipped from where its
// segments end, then whole. A multipart upload a crash left open is
// completed from its parts that hold the local bytes (their checksums
// compared with the local copy), or aborted where the local file is gone,
// and the log says which, with the parts kept and sent: never an upload
// made to look whole that was not.

// Bounds of what a start reads back from the bucket: open uploads under
// the prefix, and the objects listed of one session.
const (
	maxResumeUploads = 10000
	maxListedObjects = 200000
)

// Folder is a session folder of the capture root, by its run and session
// ids (the start's list of them, recorder.ListSessions).
type Folder struct{ Run, Session string }

// ResumeReport says what a start's resume did.
type ResumeReport struct {
	// Completed and Aborted count the open uploads a crash left.
	Completed, Aborted int
	// Shipped counts the sessions shipped (part or all), Checked those
	// found whole in the bucket.
	Shipped, Checked int
}

// Resume completes the uploads a crash left open and ships every session
// folder of root in sessions that the bucket does not hold whole. It runs
// after the start's recovery sealed the sessions a crash cut, beside new
// sessions, whose streams it leaves alone, and until done or ctx ends.
func (s *Shipper) Resume(ctx context.Context, root string, sessions []Folder) (ResumeReport, error) {
	var rep ResumeReport
	err := s.completeUploads(ctx, root, &rep)
	for _, f := range sessions {
		if err != nil {
			break
		}
		if !vocab.ValidID(f.Run) || !vocab.ValidID(f.Session) {
			continue
		}
		dir := filepath.Join(root, f.Run, f.Session)
		if s.shipping(f.Run, f.Session) || evidence.Recording(dir) {
			continue
		}
		var shipped bool
		if shipped, err = s.shipBacklog(ctx, f.Run, f.Session, dir); err == nil {
			if shipped {
				rep.Shipped++
			} else {
				rep.Checked++
			}
		}
	}
	s.log.Info("ship: start's resume done", "uploads_completed", rep.Completed, "uploads_aborted", rep.Aborted, "sessions_shipped", rep.Shipped, "sessions_whole", rep.Checked, "err", err)
	return rep, err
}

// shipping reports whether run/session has an open stream.
func (s *Shipper) shipping(run, session string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.streams[run+"/"+session]
	return ok
}

// shipBacklog ships the session folder dir where the bucket lacks it,
// and reports whether it shipped anything.
func (s *Shipper) shipBacklog(ctx context.Context, run, session, dir string) (bool, error) {
	files, _, err := listSession(dir)
	if err != nil {
		s.log.Warn("ship: session folder unreadable; not resumed", "run", run, "session", session, "err", err)
		return false, nil
	}
	prefix := s.st.cfg.Prefix
	whole, err := s.listSizes(ctx, sessionPrefix(prefix, sessionsTree, run, session))
	if err != nil {
		return false, err
	}
	have := map[string]int64{}
	missing := false
	for _, f := range files {
		if n, ok := whole[f.rel]; ok && n == f.size {
			have[f.rel] = n
		} else {
			missing = true
		}
	}
	if !missing {
		return false, nil
	}
	segs, err := s.listSizes(ctx, sessionPrefix(prefix, segmentsTree, run, session))
	if err != nil {
		return false, err
	}
	st := &Stream{sh: s, run: run, session: session, dir: dir, want: map[string]int64{}, acked: map[string]int64{},
		files: shippedSegments(segs), haveWhole: have, done: make(chan struct{})}
	s.log.Info("ship: resuming a session's shipping", "run", run, "session", session, "files_whole", len(have), "files", len(files))
	return true, st.ship(ctx, nil, sealed)
}

// shippedSegments is how far each file's segments reach in the bucket:
// the parts numbered 1, 2, ... without a hole, their sizes added up.
// Past a hole the segments are shipped again from there.
func shippedSegments(sizes map[string]int64) map[string]*fileShip {
	parts := map[string]map[int]int64{}
	for rest, n := range sizes {
		rel, part, err := parseSegmentRel(rest)
		if err != nil {
			continue
		}
		if parts[rel] == nil {
			parts[rel] = map[int]int64{}
		}
		parts[rel][part] = n
	}
	out := map[string]*fileShip{}
	for rel, byNum := range parts {
		fs := &fileShip{next: 1}
		for {
			n, ok := byNum[fs.next]
			if !ok {
				break
			}
			fs.off += n
			fs.next++
		}
		out[rel] = fs
	}
	return out
}

// listSizes lists the objects under prefix: the rest of each key after
// it, and its size.
func (s *Shipper) listSizes(ctx context.Context, prefix string) (map[string]int64, error) {
	out := map[string]int64{}
	var token *string
	for {
		var page *s3.ListObjectsV2Output
		err := s.retry(ctx, "list-objects", prefix, func(ctx context.Context) error {
			var err error
			page, err = s.st.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
				Bucket: aws.String(s.st.cfg.Bucket), Prefix: aws.String(prefix), ContinuationToken: token,
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			if len(out) == maxListedObjects {
				return nil, fmt.Errorf("ship: more than %d objects under %s", maxListedObjects, prefix)
			}
			out[strings.TrimPrefix(aws.ToString(o.Key), prefix)] = aws.ToInt64(o.Size)
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, nil
		}
		token = page.NextContinuationToken
	}
}

// completeUploads completes or aborts each multipart upload open under
// the sessions tree.
func (s *Shipper) completeUploads(ctx context.Context, root string, rep *ResumeReport) error {
	prefix := s.st.cfg.Prefix + sessionsTree
	var uploads []types.MultipartUpload
	var keyMarker, idMarker *string
	for {
		var page *s3.ListMultipartUploadsOutput
		err := s.retry(ctx, "list-multipart-uploads", prefix, func(ctx context.Context) error {
			var err error
			page, err = s.st.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
				Bucket: aws.String(s.st.cfg.Bucket), Prefix: aws.String(prefix), KeyMarker: keyMarker, UploadIdMarker: idMarker,
			})
			return err
		})
		if err != nil {
			return err
		}
		uploads = append(uploads, page.Uploads...)
		if len(uploads) > maxResumeUploads {
			return fmt.Errorf("ship: more than %d open uploads under %s", maxResumeUploads, prefix)
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		keyMarker, idMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
	for _, u := range uploads {
		key, id := aws.ToString(u.Key), aws.ToString(u.UploadId)
		run, session, rel, err := parseWholeKey(s.st.cfg.Prefix, key)
		if err != nil {
			s.log.Warn("ship: an open upload the shipper did not make; left alone", "err", err)
			continue
		}
		if s.shipping(run, session) {
			continue
		}
		completed, err := s.completeUpload(ctx, filepath.Join(root, run, session), rel, key, id)
		if err != nil {
			return err
		}
		if completed {
			rep.Completed++
		} else {
			rep.Aborted++
		}
	}
	return nil
}

// completeUpload completes the open upload id of the session file rel of
// dir from the local copy: its parts from the first that holds the local
// bytes, in order, are kept, the rest are sent, and the upload completed.
// Where the local file is gone the upload is aborted (completed is
// false): nothing is made up in its place.
func (s *Shipper) completeUpload(ctx context.Context, dir, rel, key, id string) (completed bool, err error) {
	f, size, err := safefs.OpenRegular(dir, rel)
	if err != nil {
		s.log.Warn("ship: an upload a crash left open: its local file is gone; aborted", "key", key, "err", err)
		return false, s.retry(ctx, "abort-multipart-upload", key, func(ctx context.Context) error {
			_, err := s.st.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), UploadId: aws.String(id)})
			if isCode(err, "NoSuchUpload") {
				return nil
			}
			return err
		})
	}
	f.Close()
	parts, err := s.listParts(ctx, key, id, size)
	if err != nil {
		return false, err
	}
	kept := keptParts(dir, rel, size, parts)
	lf := localFile{rel: rel, size: size}
	if err := s.uploadParts(ctx, dir, lf, key, id, kept); err != nil {
		if isLocal(err) {
			s.log.Warn("ship: an upload a crash left open: its local file is unreadable; left open", "key", key, "err", err)
			return false, nil
		}
		return false, err
	}
	sent := int((size+WholePartSize-1)/WholePartSize) - len(kept)
	s.log.Info("ship: completed an upload a crash left open, from the local copy", "key", key, "parts_kept", len(kept), "parts_sent", sent, "parts_found", len(parts))
	return true, nil
}

// listParts lists the parts of an open upload, bounded by what a file of
// size holds.
func (s *Shipper) listParts(ctx context.Context, key, id string, size int64) ([]types.Part, error) {
	limit := int(size/WholePartSize) + 2
	var parts []types.Part
	var marker *string
	for {
		var page *s3.ListPartsOutput
		err := s.retry(ctx, "list-parts", key, func(ctx context.Context) error {
			var err error
			page, err = s.st.client.ListParts(ctx, &s3.ListPartsInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), UploadId: aws.String(id), PartNumberMarker: marker})
			return err
		})
		if err != nil {
			return nil, err
		}
		parts = append(parts, page.Parts...)
		if len(parts) > limit {
			return nil, fmt.Errorf("ship: %s: more parts than its local file holds", key)
		}
		if !aws.ToBool(page.IsTruncated) {
			return parts, nil
		}
		marker = page.NextPartNumberMarker
	}
}

// keptParts are the parts of an open upload that may stay: numbered 1,
// 2, ... without a hole, each WholePartSize (the last of the file
// shorter) and holding the local file's bytes at its place, by its
// SHA-256.
func keptParts(dir, rel string, size int64, parts []types.Part) []types.CompletedPart {
	slices.SortFunc(parts, func(a, b types.Part) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	var kept []types.CompletedPart
	for i, p := range parts {
		num := int32(i + 1)
		off := int64(i) * WholePartSize
		n := min(size-off, WholePartSize)
		if aws.ToInt32(p.PartNumber) != num || n <= 0 || aws.ToInt64(p.Size) != n {
			break
		}
		sec, err := openSection(dir, rel, off, n)
		if err != nil {
			break
		}
		sec.close()
		sum := checksum(sec.sum[:])
		if aws.ToString(p.ChecksumSHA256) != sum {
			break
		}
		kept = append(kept, types.CompletedPart{PartNumber: p.PartNumber, ETag: p.ETag, ChecksumSHA256: aws.String(sum)})
	}
	return kept
}
