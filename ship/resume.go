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
	// maxListedObjects bounds a listing held whole (verify --shipped's
	// of one session's segments).
	maxListedObjects = 1000000
)

// Folder is a session folder of the capture root, by its run and session
// ids (the start's list of them, recorder.ListSessions).
type Folder struct{ Run, Session string }

// ResumeReport says what a start's resume did.
type ResumeReport struct {
	// Completed and Aborted count the open uploads a crash left.
	Completed, Aborted int
	// Shipped counts the sessions shipped (part or all), Checked those
	// found whole in the bucket, Failed those that could not be.
	Shipped, Checked, Failed int
}

// Resume completes the uploads a crash left open and ships every session
// folder of root in sessions that the bucket does not hold whole. It runs
// after the start's recovery sealed the sessions a crash cut, beside new
// sessions, whose streams it leaves alone, and until done or ctx ends.
func (s *Shipper) Resume(ctx context.Context, root string, sessions []Folder) (ResumeReport, error) {
	var rep ResumeReport
	err := s.completeUploads(ctx, root, &rep)
	for _, f := range sessions {
		if ctx.Err() != nil {
			break
		}
		if !vocab.ValidID(f.Run) || !vocab.ValidID(f.Session) {
			continue
		}
		dir := filepath.Join(root, f.Run, f.Session)
		if s.shipping(f.Run, f.Session) || evidence.Recording(dir) {
			continue
		}
		// One session the store or its folder will not let be shipped
		// does not keep the others from it.
		shipped, serr := s.shipBacklog(ctx, f.Run, f.Session, dir)
		switch {
		case serr != nil && ctx.Err() == nil:
			rep.Failed++
			s.log.Error("ship: a session earlier runs left was not shipped; the next start tries again", "run", f.Run, "session", f.Session, "err", serr.Error())
		case shipped:
			rep.Shipped++
		case serr == nil:
			rep.Checked++
		}
	}
	if err == nil {
		err = ctx.Err()
	}
	s.log.Info("ship: start's resume done", "uploads_completed", rep.Completed, "uploads_aborted", rep.Aborted, "sessions_shipped", rep.Shipped, "sessions_whole", rep.Checked, "sessions_failed", rep.Failed, "err", err)
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
	whole, err := s.listSizes(ctx, sessionPrefix(prefix, sessionsTree, run, session), 2*vocab.ManifestMaxFiles)
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
	shipped, err := s.foldSegments(ctx, sessionPrefix(prefix, segmentsTree, run, session))
	if err != nil {
		return false, err
	}
	st := &Stream{sh: s, run: run, session: session, dir: dir, want: map[string]int64{}, acked: map[string]int64{},
		files: shipped, haveWhole: have, done: make(chan struct{}), working: s.st.now()}
	// Among the open streams while it ships, so that readiness counts
	// its lag (behind past BehindAfter) and no second start of it runs.
	key := run + "/" + session
	s.mu.Lock()
	if _, busy := s.streams[key]; busy {
		s.mu.Unlock()
		return false, nil
	}
	s.streams[key] = st
	s.mu.Unlock()
	defer s.finish(st, true)
	s.log.Info("ship: resuming a session's shipping", "run", run, "session", session, "files_whole", len(have), "files", len(files))
	return true, st.ship(ctx, nil, sealed)
}

// maxListPages bounds the pages of one listing (a thousand keys each): a
// store that answers "truncated" without end is not followed for ever.
const maxListPages = 100000

// eachObject calls fn with the rest of each key under prefix (after it)
// and its size, in the store's order (by key), page by page.
func (s *Shipper) eachObject(ctx context.Context, prefix string, fn func(rest string, size int64) error) error {
	var token *string
	for range maxListPages {
		var page *s3.ListObjectsV2Output
		err := s.retry(ctx, "list-objects", prefix, func(ctx context.Context) error {
			var err error
			page, err = s.st.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
				Bucket: aws.String(s.st.cfg.Bucket), Prefix: aws.String(prefix), ContinuationToken: token,
			})
			return err
		})
		if err != nil {
			return err
		}
		for _, o := range page.Contents {
			rest, ok := strings.CutPrefix(aws.ToString(o.Key), prefix)
			if !ok {
				continue // not what was asked for
			}
			if err := fn(rest, aws.ToInt64(o.Size)); err != nil {
				return err
			}
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil || len(page.Contents) == 0 {
			return nil
		}
		token = page.NextContinuationToken
	}
	return fmt.Errorf("ship: more than %d pages of objects under %s", maxListPages, prefix)
}

// listSizes lists at most limit objects under prefix: the rest of each
// key after it, and its size.
func (s *Shipper) listSizes(ctx context.Context, prefix string, limit int) (map[string]int64, error) {
	out := map[string]int64{}
	err := s.eachObject(ctx, prefix, func(rest string, size int64) error {
		if len(out) == limit {
			return fmt.Errorf("ship: more than %d objects under %s", limit, prefix)
		}
		out[rest] = size
		return nil
	})
	return out, err
}

// foldSegments is how far each file's segments under prefix reach: the
// parts numbered 1, 2, ... without a hole, their sizes added up (past a
// hole they are shipped again from there). The listing is folded as it
// comes, in key order, which is each file's part order: a session of a
// million segments costs the pages, not the memory.
func (s *Shipper) foldSegments(ctx context.Context, prefix string) (map[string]*fileShip, error) {
	out := map[string]*fileShip{}
	holed := map[string]bool{}
	err := s.eachObject(ctx, prefix, func(rest string, size int64) error {
		rel, part, err := parseSegmentRel(rest)
		if err != nil || holed[rel] {
			return nil
		}
		fs := out[rel]
		if fs == nil {
			if len(out) == vocab.ManifestMaxFiles {
				return nil
			}
			fs = &fileShip{next: 1}
			out[rel] = fs
		}
		holed[rel] = !fs.extend(part, size)
		return nil
	})
	return out, err
}

// completeUploads completes or aborts each multipart upload open under
// the prefix: a session file's from its local copy; a lab-wide log's is
// aborted, its file found again by inode and uploaded whole anew
// (rootlogs_linux.go).
func (s *Shipper) completeUploads(ctx context.Context, root string, rep *ResumeReport) error {
	prefix := s.st.cfg.Prefix
	var uploads []types.MultipartUpload
	var keyMarker, idMarker *string
	for range maxListPages {
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
			return fmt.Errorf("ship: more than %d open uploads under %q", maxResumeUploads, prefix)
		}
		if !aws.ToBool(page.IsTruncated) || len(page.Uploads) == 0 {
			break
		}
		keyMarker, idMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
	for _, u := range uploads {
		key, id := aws.ToString(u.Key), aws.ToString(u.UploadId)
		if strings.HasPrefix(key, prefix+rootLogsTree) {
			if !aws.ToTime(u.Initiated).Before(s.started) {
				continue // this start's own, in progress
			}
			if err := s.abortUpload(ctx, key, id); err != nil {
				return err
			}
			s.log.Info("ship: aborted a lab-wide log's upload a crash left open; the file goes whole again", "key", key)
			rep.Aborted++
			continue
		}
		run, session, rel, err := parseWholeKey(prefix, key)
		if err != nil {
			s.log.Warn("ship: an open upload the shipper did not make; left alone", "err", err)
			continue
		}
		if s.shipping(run, session) {
			continue
		}
		completed, err := s.completeUpload(ctx, filepath.Join(root, run, session), rel, key, id)
		switch {
		case isCode(err, codeNoSuchUpload):
			// Completed or aborted since the listing (a session of
			// this start that closed meanwhile): not this start's.
		case err != nil:
			return err
		case completed:
			rep.Completed++
		default:
			rep.Aborted++
		}
	}
	return nil
}

// abortUpload aborts an open upload; one already gone is no error.
func (s *Shipper) abortUpload(ctx context.Context, key, id string) error {
	err := s.retry(ctx, "abort-multipart-upload", key, func(ctx context.Context) error {
		_, err := s.st.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), UploadId: aws.String(id)})
		return err
	})
	if isCode(err, codeNoSuchUpload) {
		return nil
	}
	return err
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
		return false, s.abortUpload(ctx, key, id)
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
	for range maxListPages {
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
		if !aws.ToBool(page.IsTruncated) || len(page.Parts) == 0 {
			return parts, nil
		}
		marker = page.NextPartNumberMarker
	}
	return nil, fmt.Errorf("ship: %s: more than %d pages of parts", key, maxListPages)
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
