package ship

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config says where the evidence goes. Credentials are never part of it:
// the SDK takes them from the standard AWS environment and files
// (AWS_ACCESS_KEY_ID, AWS_PROFILE, ~/.aws/credentials, ...), so no key
// passes through the sidecar's flags or its log.
type Config struct {
	// Endpoint is the store's URL (http://host:port for a self-hosted
	// gateway); empty: the region's AWS endpoint.
	Endpoint string
	Bucket   string
	// Prefix is prepended to every object key ("" or ending in "/").
	Prefix string
	// Region signs the requests; empty: the SDK's (AWS_REGION, the
	// profile), else us-east-1.
	Region string
	// PathStyle addresses the bucket in the path (host/bucket/key), as
	// self-hosted gateways need, not in the host name.
	PathStyle bool
	// Retention, when set, locks every object the shipper writes in
	// COMPLIANCE mode until its upload time plus Retention: nobody, the
	// bucket's owner included, deletes or overwrites that version before.
	// The bucket must have Object Lock enabled.
	Retention time.Duration
	// Workers is how many uploads run at once (default DefaultWorkers).
	Workers int
}

// DefaultWorkers is the uploads that run at once by default: enough to
// keep 16 streaming sessions' checkpoints within a second of the store on
// a LAN, few enough that an outage's retries stay cheap.
const DefaultWorkers = 8

// Bounds of the settings: a bucket name as S3 defines it, a prefix well
// under S3's 1024-byte key limit with room for the session's paths.
const (
	maxPrefix      = 256
	maxWorkers     = 64
	maxRetention   = 100 * 365 * 24 * time.Hour
	minBucket      = 3
	maxBucket      = 63
	requestTimeout = 60 * time.Second
)

// SettingError is a setting Validate refuses: which (bucket, endpoint,
// prefix, retention, workers) and why.
type SettingError struct{ Setting, Reason string }

func (e *SettingError) Error() string { return "ship: " + e.Setting + ": " + e.Reason }

func refuse(setting, format string, args ...any) error {
	return &SettingError{Setting: setting, Reason: fmt.Sprintf(format, args...)}
}

// Validate names the first setting that is wrong.
func (c Config) Validate() error {
	if n := len(c.Bucket); n < minBucket || n > maxBucket {
		return refuse("bucket", "%q: a bucket name is %d to %d characters", c.Bucket, minBucket, maxBucket)
	}
	for _, r := range c.Bucket {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.') {
			return refuse("bucket", "%q: only lowercase letters, digits, '-' and '.'", c.Bucket)
		}
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return refuse("endpoint", "%q: want http(s)://host[:port], without credentials", redactURL(c.Endpoint))
		}
	}
	if c.Retention < 0 || c.Retention > maxRetention {
		return refuse("retention", "%v: want 0 (no Object Lock) up to %v", c.Retention, maxRetention)
	}
	if c.Retention > 0 && c.Retention < 24*time.Hour {
		// Any date is valid per object, but a lock of hours keeps
		// evidence from nobody: a day is the least the setting takes.
		return refuse("retention", "%v: at least 24h", c.Retention)
	}
	if c.Workers < 0 || c.Workers > maxWorkers {
		return refuse("workers", "%d: want 1 to %d", c.Workers, maxWorkers)
	}
	return nil
}

func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > maxPrefix || !strings.HasSuffix(p, "/") || strings.HasPrefix(p, "/") || strings.Contains(p, "//") {
		return refuse("prefix", "%q: want up to %d bytes ending in '/', not starting with one, no empty component", p, maxPrefix)
	}
	for _, part := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if part == "." || part == ".." {
			return refuse("prefix", "%q: no '.' or '..' component", p)
		}
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return refuse("prefix", "%q: no control characters", p)
		}
	}
	return nil
}

// redactURL keeps a URL's credentials, if someone put them there, out of
// an error message.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User("REDACTED")
		return u.String()
	}
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// newClient makes the S3 client of c, with the SDK's standard credential
// chain. Its own retries are off: the shipper retries every request
// itself, without end and with its own backoff, and counts each failure
// into its state.
func newClient(ctx context.Context, c Config) (*s3.Client, error) {
	opts := []func(*awsconfig.LoadOptions) error{awsconfig.WithRetryMaxAttempts(1)}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("ship: AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("ship: no AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile): %w", err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
		// A checksum is sent with each request the shipper makes (it
		// computes SHA-256 itself); the SDK adds none of its own.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	}), nil
}
