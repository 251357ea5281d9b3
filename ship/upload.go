package ship

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// WholePartSize is the part size of a file uploaded whole with a
// multipart upload, and the size above which one is used: S3 takes parts
// of 5 MiB and up, and a part is what a crash's completer checks and
// keeps (resume.go).
const WholePartSize = 8 << 20

// localError is a failure of the local copy (a file gone or shorter than
// it was): no retry mends it, so it is logged and that file's shipping
// stops, where a failure of the store is retried.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

// putSection uploads [off, off+n) of the session file rel of dir as the
// object key, retried until the store confirms its SHA-256, and returns
// the entity tag and the digest.
func (s *Shipper) putSection(ctx context.Context, dir, rel string, off, n int64, key string) (string, [sha256.Size]byte, error) {
	sec, err := openSection(dir, rel, off, n)
	if err != nil {
		return "", [sha256.Size]byte{}, &localError{err}
	}
	defer sec.close()
	var etag string
	err = s.retry(ctx, "put", key, func(ctx context.Context) error {
		var err error
		etag, err = s.st.put(ctx, key, sec)
		return err
	})
	return etag, sec.sum, err
}

// putWhole uploads the session file f of dir whole as the object key: a
// file up to WholePartSize in one request, a larger one as a multipart
// upload of WholePartSize parts, each with its SHA-256.
func (s *Shipper) putWhole(ctx context.Context, dir string, f localFile, key string) error {
	if f.size <= WholePartSize {
		_, _, err := s.putSection(ctx, dir, f.rel, 0, f.size, key)
		return err
	}
	// An upload the store drops under it (a lifecycle rule that aborts
	// incomplete uploads, an operator) is begun again, a few times.
	for range maxUploadRestarts {
		err := s.multipartWhole(ctx, dir, f, key)
		if !isCode(err, codeNoSuchUpload) {
			return err
		}
		s.log.Warn("ship: the store dropped a whole file's upload; begun again", "key", key)
	}
	return fmt.Errorf("ship: %s: the store dropped the upload %d times", key, maxUploadRestarts)
}

// maxUploadRestarts bounds the times one whole upload is begun again.
const maxUploadRestarts = 3

// multipartWhole is putWhole's multipart upload, once.
func (s *Shipper) multipartWhole(ctx context.Context, dir string, f localFile, key string) error {
	var id string
	err := s.retry(ctx, "create-multipart-upload", key, func(ctx context.Context) error {
		in := &s3.CreateMultipartUploadInput{
			Bucket:            aws.String(s.st.cfg.Bucket),
			Key:               aws.String(key),
			ChecksumAlgorithm: types.ChecksumAlgorithmSha256,
		}
		if until := s.st.lockUntil(); until != nil {
			in.ObjectLockMode = types.ObjectLockModeCompliance
			in.ObjectLockRetainUntilDate = until
		}
		out, err := s.st.client.CreateMultipartUpload(ctx, in)
		if err == nil {
			id = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		return err
	}
	return s.uploadParts(ctx, dir, f, key, id, nil)
}

// uploadParts uploads the parts of f after those in kept (parts a crash
// left, already checked against the local copy) and completes the upload.
func (s *Shipper) uploadParts(ctx context.Context, dir string, f localFile, key, id string, kept []types.CompletedPart) error {
	parts := kept
	for off := int64(len(kept)) * WholePartSize; off < f.size; off += WholePartSize {
		n := min(f.size-off, WholePartSize)
		num := int32(off/WholePartSize) + 1
		sec, err := openSection(dir, f.rel, off, n)
		if err != nil {
			return &localError{err}
		}
		sum := checksum(sec.sum[:])
		var etag string
		err = s.retry(ctx, "upload-part", key, func(ctx context.Context) error {
			out, err := s.st.client.UploadPart(ctx, &s3.UploadPartInput{
				Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), UploadId: aws.String(id),
				PartNumber: aws.Int32(num), Body: sec.reader(), ContentLength: aws.Int64(n),
				ChecksumSHA256: aws.String(sum),
			}, signedWith(sec.sum[:]))
			if err != nil {
				return err
			}
			if got := aws.ToString(out.ChecksumSHA256); got != sum {
				return &unconfirmed{key: fmt.Sprintf("%s part %d", key, num), want: sum, got: got}
			}
			etag = aws.ToString(out.ETag)
			return nil
		})
		sec.close()
		if err != nil {
			return err
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: aws.String(etag), ChecksumSHA256: aws.String(sum)})
	}
	return s.retry(ctx, "complete-multipart-upload", key, func(ctx context.Context) error {
		_, err := s.st.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key), UploadId: aws.String(id),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
		})
		if isCode(err, codeNoSuchUpload) {
			// A completion whose answer was lost, retried: the upload
			// is gone because the object is made. It is, if it has
			// the file's size.
			head, herr := s.st.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.st.cfg.Bucket), Key: aws.String(key)})
			if herr == nil && aws.ToInt64(head.ContentLength) == f.size {
				return nil
			}
		}
		return err
	})
}

// codeNoSuchUpload is the store's answer about a multipart upload it
// does not have (any more).
const codeNoSuchUpload = "NoSuchUpload"

// isCode reports whether err is the store's error of that code.
func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// isLocal reports whether err is the local copy's, not the store's.
func isLocal(err error) bool {
	var l *localError
	return errors.As(err, &l)
}
