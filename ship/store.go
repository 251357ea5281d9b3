package ship

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// store is the bucket, through the SDK: the requests the shipper, the
// start's completer and verify --shipped make.
type store struct {
	cfg    Config
	client *s3.Client
	now    func() time.Time
}

func newStore(ctx context.Context, cfg Config) (*store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	client, err := newClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &store{cfg: cfg, client: client, now: time.Now}, nil
}

// checksum is the form of a SHA-256 that S3's x-amz-checksum-sha256 takes.
func checksum(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }

// lockUntil is the retain-until date of an object written now, or nil
// where the shipper sets no Object Lock.
func (s *store) lockUntil() *time.Time {
	if s.cfg.Retention <= 0 {
		return nil
	}
	t := s.now().Add(s.cfg.Retention).UTC().Truncate(time.Second)
	return &t
}

// put uploads sec as the object key with its SHA-256, which the store
// checks against the bytes that arrived and refuses on a difference
// (BadDigest); an answer that does not echo the same checksum is no
// confirmation, and an error. It returns the object's entity tag.
func (s *store) put(ctx context.Context, key string, sec *section) (string, error) {
	sum := checksum(sec.sum[:])
	in := &s3.PutObjectInput{
		Bucket:         aws.String(s.cfg.Bucket),
		Key:            aws.String(key),
		Body:           sec.reader(),
		ContentLength:  aws.Int64(sec.n),
		ChecksumSHA256: aws.String(sum),
	}
	if until := s.lockUntil(); until != nil {
		in.ObjectLockMode = types.ObjectLockModeCompliance
		in.ObjectLockRetainUntilDate = until
	}
	out, err := s.client.PutObject(ctx, in, signedWith(sec.sum[:]))
	if err != nil {
		return "", err
	}
	if got := aws.ToString(out.ChecksumSHA256); got != sum {
		return "", &unconfirmed{key: key, want: sum, got: got}
	}
	return aws.ToString(out.ETag), nil
}

// signedWith has a request sign the body's SHA-256 the shipper already
// computed (openSection) as its payload hash: without it the SDK reads
// and hashes every body a second time to sign it (x-amz-content-sha256)
// wherever it signs the payload, plain-HTTP gateways among them. The hash
// is set inside the operation's stack, which starts with its values
// cleared.
func signedWith(sum []byte) func(*s3.Options) {
	payload := hex.EncodeToString(sum)
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("aptlPayloadHash",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					return next.HandleInitialize(v4.SetPayloadHash(ctx, payload), in)
				}), middleware.Before)
		})
	}
}

// unconfirmed is a store's answer that took an object without confirming
// its checksum: the local copy stays the only one known good.
type unconfirmed struct{ key, want, got string }

func (e *unconfirmed) Error() string {
	if e.got == "" {
		return fmt.Sprintf("ship: %s: the store did not confirm the SHA-256 it was sent", e.key)
	}
	return fmt.Sprintf("ship: %s: the store confirmed SHA-256 %s, not the %s sent", e.key, e.got, e.want)
}

// Backoff of the shipper's retries: from the first to the most, doubled
// with jitter. Every failed request is retried until it succeeds or the
// shipper stops: the local copy is authoritative, and what is not shipped
// by then is shipped by the next start.
const (
	firstBackoff = 200 * time.Millisecond
	maxBackoff   = 15 * time.Second
)

// backoff is the wait before retry n (from 0).
func backoff(n int) time.Duration {
	d := firstBackoff << min(n, 10)
	d = min(d, maxBackoff)
	// Up to a quarter off, so sessions that failed together do not retry
	// together.
	return d - time.Duration(rand.Int64N(int64(d/4)+1))
}

// refused reports whether err is the store's answer that retrying the
// same request will not change (an HTTP 4xx other than a timeout or a
// throttle: access denied, no such bucket, a lock refusing the write),
// as against an outage or a fault of its own, which ends by itself.
func refused(err error) bool {
	var u *unconfirmed
	if errors.As(err, &u) {
		return true
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		code := re.HTTPStatusCode()
		return code >= 400 && code < 500 && code != http.StatusRequestTimeout && code != http.StatusTooManyRequests
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorFault() == smithy.FaultClient
}

// describe is an error of the store for the log: its code and message,
// or the transport's error, bounded; never a request's body or headers.
func describe(err error) string {
	var ae smithy.APIError
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.ErrorCode() + ": " + ae.ErrorMessage()
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}
