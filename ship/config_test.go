package ship

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	smithyhttp "github.com/aws/smithy-go/transport/http"
)

func TestValidateNamesTheSettingAtFault(t *testing.T) {
	ok := Config{Bucket: "aptl-evidence", Prefix: "lab/", Endpoint: "http://127.0.0.1:7070", Retention: 48 * time.Hour, Workers: 4}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for _, tc := range []struct {
		setting string
		mutate  func(*Config)
		says    string
	}{
		{"bucket", func(c *Config) { c.Bucket = "" }, "3 to 63"},
		{"bucket", func(c *Config) { c.Bucket = "Evidence" }, "lowercase"},
		{"prefix", func(c *Config) { c.Prefix = "lab" }, "ending in '/'"},
		{"prefix", func(c *Config) { c.Prefix = "/lab/" }, "not starting"},
		{"prefix", func(c *Config) { c.Prefix = "a/../b/" }, "'..'"},
		{"prefix", func(c *Config) { c.Prefix = "a\x1b/" }, "control"},
		{"endpoint", func(c *Config) { c.Endpoint = "ftp://host" }, "http(s)"},
		{"endpoint", func(c *Config) { c.Endpoint = "http://user:secret@host" }, "without credentials"},
		{"retention", func(c *Config) { c.Retention = time.Hour }, "at least 24h"},
		{"retention", func(c *Config) { c.Retention = -time.Hour }, "want 0"},
		{"workers", func(c *Config) { c.Workers = 65 }, "1 to 64"},
	} {
		c := ok
		tc.mutate(&c)
		err := c.Validate()
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != tc.setting || !strings.Contains(se.Reason, tc.says) {
			t.Errorf("%+v: %v, want the %s setting refused saying %q", c, err, tc.setting, tc.says)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error shows the endpoint's password: %v", err)
		}
	}
}

func TestSegmentKeysParseBackAndRefuseWhatTheShipperNeverWrites(t *testing.T) {
	key := segmentKey("lab/", "run-1", "s-1", "pty/typescript", 12)
	if key != "lab/segments/run-1/s-1/pty/typescript/00000012" {
		t.Fatalf("segment key %q", key)
	}
	rel, part, err := parseSegmentRel(strings.TrimPrefix(key, sessionPrefix("lab/", segmentsTree, "run-1", "s-1")))
	if err != nil || rel != "pty/typescript" || part != 12 {
		t.Fatalf("parsed %q %d %v", rel, part, err)
	}
	for _, bad := range []string{"pty/typescript/12", "pty/typescript/00000000", "../x/00000001", "a/b/c/00000001", "pty/typescript/0000000x", "00000001"} {
		if _, _, err := parseSegmentRel(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	run, session, rel, err := parseWholeKey("lab/", wholeKey("lab/", "run-1", "s-1", "SHA256SUMS"))
	if err != nil || run != "run-1" || session != "s-1" || rel != "SHA256SUMS" {
		t.Fatalf("whole key parsed %q %q %q %v", run, session, rel, err)
	}
	for _, bad := range []string{"other/sessions/r/s/pty/x", "lab/sessions/r/s", "lab/sessions/../s/pty/x", "lab/sessions/r/s/notes.txt"} {
		if _, _, _, err := parseWholeKey("lab/", bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestBackoffDoublesToItsBoundWithJitter(t *testing.T) {
	for n := range 40 {
		d := backoff(n)
		want := min(firstBackoff<<min(n, 10), maxBackoff)
		if d > want || d < want*3/4 {
			t.Fatalf("backoff(%d) = %v, want within [%v, %v]", n, d, want*3/4, want)
		}
	}
}

func TestRefusedTellsARefusalFromAnOutage(t *testing.T) {
	resp := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("x")}
	}
	for code, want := range map[int]bool{403: true, 404: true, 400: true, 408: false, 429: false, 500: false, 503: false} {
		if got := refused(resp(code)); got != want {
			t.Errorf("HTTP %d: refused %v, want %v", code, got, want)
		}
	}
	if refused(errors.New("dial tcp: connection refused")) {
		t.Error("a connection refused is an outage, not the store's refusal")
	}
	if !refused(&unconfirmed{key: "k", want: "a"}) {
		t.Error("an unconfirmed checksum is a refusal")
	}
}

func TestBoundETagKeepsAStoresTagOutOfTheChainWhenItIsNoTag(t *testing.T) {
	for in, want := range map[string]string{
		`"b00f5ebd2719660908505ec74f769ad0"`:   `"b00f5ebd2719660908505ec74f769ad0"`,
		`"b00f5ebd2719660908505ec74f769ad0-3"`: `"b00f5ebd2719660908505ec74f769ad0-3"`,
		strings.Repeat("a", maxETag):           strings.Repeat("a", maxETag),
		strings.Repeat("a", maxETag+1):         "",
		"tag\x1b[2J":                           "",
		"tag\u00e9":                            "",
	} {
		if got := boundETag(in); got != want {
			t.Errorf("boundETag(%q) = %q, want %q", in, got, want)
		}
	}
}
