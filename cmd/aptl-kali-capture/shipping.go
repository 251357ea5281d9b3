package main

import (
	"errors"

	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/ship"
)

// shipSettings are the object store's settings, shared by serve (which
// ships, when a bucket is set) and verify --shipped (which compares).
// Credentials are not among them: the AWS SDK reads the standard AWS
// environment and files (docs/OPERATING.md, "Shipping").
type shipSettings struct {
	cfg       ship.Config
	pathStyle bool
}

// bindShipFlags declares the settings on e; config says what they give,
// after Parse.
func bindShipFlags(e *cliconfig.Flags, s *shipSettings) {
	e.String(&s.cfg.Bucket, "ship-bucket", "APTL_CAPTURE_SHIP_BUCKET", "", "S3 bucket the sessions' evidence is shipped to while they run (empty: shipping off)")
	e.String(&s.cfg.Endpoint, "ship-endpoint", "APTL_CAPTURE_SHIP_ENDPOINT", "", "the store's URL, http(s)://host[:port], for a self-hosted gateway (empty: AWS's, by region)")
	e.String(&s.cfg.Prefix, "ship-prefix", "APTL_CAPTURE_SHIP_PREFIX", "", "key prefix of every object, ending in / (empty: none)")
	e.String(&s.cfg.Region, "ship-region", "APTL_CAPTURE_SHIP_REGION", "", "region requests are signed for (empty: AWS_REGION or the profile's, else us-east-1)")
	e.Bool(&s.pathStyle, "ship-path-style", "APTL_CAPTURE_SHIP_PATH_STYLE", "address the bucket in the URL's path (self-hosted gateways), not in its host name")
}

// config is the store's configuration, checked; the setting at fault is
// named.
func (s *shipSettings) config(e *cliconfig.Flags) (ship.Config, error) {
	c := s.cfg
	c.PathStyle = s.pathStyle
	var bad *ship.SettingError
	if err := c.Validate(); errors.As(err, &bad) {
		return c, e.SettingError("ship-"+bad.Setting, "%s", bad.Reason)
	} else if err != nil {
		return c, err
	}
	return c, nil
}
