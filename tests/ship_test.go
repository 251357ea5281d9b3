package tests

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
	"github.com/aptl/aptl-kali-capture/ship"
)

// The S3 suite: sessions recorded by the real recorder and shipped by the
// real shipper to versitygw (package s3test), checked with the stock aws
// CLI and with verify's own reading of what came back. It skips, saying
// what is missing, without versitygw or the aws CLI.

const shipPrefix = "lab/"

// shipTo starts a shipper to g; stop drains it (bounded) and returns its
// log.
func shipTo(t testing.TB, g *s3test.Gateway, retention time.Duration) (s *ship.Shipper, cfg ship.Config, log *testutil.LockedBuffer) {
	t.Helper()
	g.SetEnv(t)
	cfg = ship.Config{Endpoint: g.Endpoint, Bucket: g.Bucket, Region: g.Region, PathStyle: true, Prefix: shipPrefix, Retention: retention}
	log = &testutil.LockedBuffer{}
	s, err := ship.New(context.Background(), cfg, slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drain(t, s) })
	return s, cfg, log
}

// drain waits for the shipper to ship what it was given, at most 30 s.
func drain(t testing.TB, s *ship.Shipper) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Errorf("shipper did not drain: %v", err)
	}
}

// shippedSession starts a session of run "run-ship" recorded with s.
func shippedSession(t *testing.T, root, id string, s *ship.Shipper) *recorder.Session {
	t.Helper()
	rec, err := recorder.Create(root, recorder.Meta{RunID: "run-ship", SessionID: id}, recorder.Options{Signer: recordertest.Signer(), Shipper: s})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// headChecksum is the store's SHA-256 of key, in hex, as the aws CLI
// reports it.
func headChecksum(t *testing.T, g *s3test.Gateway, key string) string {
	t.Helper()
	var head struct{ ChecksumSHA256 string }
	b := g.AWS(t, "s3api", "head-object", "--bucket", g.Bucket, "--key", key, "--checksum-mode", "ENABLED")
	if err := json.Unmarshal(b, &head); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	raw, err := base64.StdEncoding.DecodeString(head.ChecksumSHA256)
	if err != nil {
		t.Fatalf("%s: checksum %q: %v", key, head.ChecksumSHA256, err)
	}
	return hex.EncodeToString(raw)
}

func segmentKey(session, file string, part int) string {
	return fmt.Sprintf("%ssegments/run-ship/%s/%s/%08d", shipPrefix, session, file, part)
}

func shippedFolderOK(t *testing.T, what, dir string) *evidence.Report {
	t.Helper()
	rep := evidence.Verify(dir, evidence.Keys{Trusted: recordertest.Trusted()}, evidence.Options{})
	if !rep.OK() {
		t.Fatalf("%s: status %s, anomalies %v", what, rep.Status, rep.Anomalies)
	}
	return rep
}

// TestShippedSessionIsInTheBucketDuringTheSessionAndVerifiesFromIt: the
// segments appear while the session runs, each shipped record's digest is
// the store's checksum of its object, a copy downloaded with the aws CLI
// verifies as the local folder does, verify --shipped finds nothing, and
// the bucket's Object Lock refuses deleting a segment and keeps it
// through an overwrite.
func TestShippedSessionIsInTheBucketDuringTheSessionAndVerifiesFromIt(t *testing.T) {
	g := s3test.Start(t, s3test.Options{ObjectLock: true})
	s, cfg, _ := shipTo(t, g, 24*time.Hour)
	root := t.TempDir()
	rec := shippedSession(t, root, "s1", s)
	if err := rec.Output([]byte("$ id\r\nuid=1000(kali)\r\n")); err != nil {
		t.Fatal(err)
	}
	// The first tick's checkpoint is the first point: the log's first
	// segment (the open record, its signature) and the typescript's.
	logKey, tsKey := segmentKey("s1", "pty/integrity.jsonl", 1), segmentKey("s1", "pty/typescript", 1)
	if !testutil.WaitUntil(func() bool {
		o := g.Objects(t, shipPrefix+"segments/run-ship/s1/")
		return o[logKey] > 0 && o[tsKey] > 0
	}) {
		t.Fatalf("no segments in the bucket while the session runs: %v", g.Objects(t, shipPrefix))
	}
	if whole := g.Objects(t, shipPrefix+"sessions/"); len(whole) != 0 {
		t.Fatalf("whole objects before the session closed: %v", whole)
	}
	for i := range 3 {
		if err := rec.Output([]byte(strings.Repeat(fmt.Sprintf("line %d\r\n", i), 100))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond)
	}
	if err := rec.Close(0); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	dir := filepath.Join(root, "run-ship", "s1")
	rep := shippedFolderOK(t, "local folder", dir)
	if len(rep.Shipped) < 3 || rep.ShippedSegments != len(rep.Shipped) {
		t.Fatalf("the chain records %d shipped segments (%d parsed); want at least 3", rep.ShippedSegments, len(rep.Shipped))
	}
	for _, p := range rep.Shipped {
		if got := headChecksum(t, g, segmentKey("s1", p.File, p.Part)); got != p.SHA256 {
			t.Errorf("%s part %d: the chain says %s, the store's checksum is %s", p.File, p.Part, p.SHA256, got)
		}
	}

	// Any copy: the sessions tree downloaded with the stock CLI.
	copyDir := filepath.Join(t.TempDir(), "run-ship", "s1")
	g.AWS(t, "s3", "cp", "--recursive", "--only-show-errors", "s3://"+g.Bucket+"/"+shipPrefix+"sessions/run-ship/s1/", copyDir)
	copied := shippedFolderOK(t, "downloaded copy", copyDir)
	if copied.Status != rep.Status || copied.Records != rep.Records || copied.ShippedSegments != rep.ShippedSegments {
		t.Fatalf("downloaded copy: status %s records %d shipped %d; local: %s %d %d", copied.Status, copied.Records, copied.ShippedSegments, rep.Status, rep.Records, rep.ShippedSegments)
	}
	c, err := ship.Compare(context.Background(), cfg, dir, "run-ship", "s1", rep.Shipped, rep.ShippedSegments)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Findings) != 0 || c.Segments < len(rep.Shipped) || c.Whole == 0 {
		t.Fatalf("verify --shipped of an intact session: %+v", c)
	}

	// Object Lock: the segment's version cannot be deleted, and an
	// overwrite makes a new version beside it, which stays as shipped.
	var versions struct {
		Versions []struct {
			VersionID string `json:"VersionId"`
			Key       string
		}
	}
	if err := json.Unmarshal(g.AWS(t, "s3api", "list-object-versions", "--bucket", g.Bucket, "--prefix", tsKey), &versions); err != nil || len(versions.Versions) != 1 {
		t.Fatalf("versions of %s: %+v (%v)", tsKey, versions, err)
	}
	version := versions.Versions[0].VersionID
	var retention struct{ Retention struct{ Mode string } }
	json.Unmarshal(g.AWS(t, "s3api", "get-object-retention", "--bucket", g.Bucket, "--key", tsKey, "--version-id", version), &retention)
	if retention.Retention.Mode != "COMPLIANCE" {
		t.Fatalf("retention of %s: %+v", tsKey, retention)
	}
	if _, err := g.TryAWS("s3api", "delete-object", "--bucket", g.Bucket, "--key", tsKey, "--version-id", version); err == nil {
		t.Fatal("deleting a locked segment's version was not refused")
	}
	forged := testutil.WriteFixture(t, "forged", "forged bytes")
	g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", tsKey, "--body", forged)
	before := rep.Shipped[0]
	for _, p := range rep.Shipped {
		if p.File == "pty/typescript" && p.Part == 1 {
			before = p
		}
	}
	var orig struct{ ChecksumSHA256 string }
	json.Unmarshal(g.AWS(t, "s3api", "head-object", "--bucket", g.Bucket, "--key", tsKey, "--version-id", version, "--checksum-mode", "ENABLED"), &orig)
	if raw, _ := base64.StdEncoding.DecodeString(orig.ChecksumSHA256); hex.EncodeToString(raw) != before.SHA256 {
		t.Fatalf("the locked version's checksum after an overwrite: %q, the chain's %s", orig.ChecksumSHA256, before.SHA256)
	}
	// The overwrite is what verify --shipped reads now: it says so.
	c, err = ship.Compare(context.Background(), cfg, dir, "run-ship", "s1", rep.Shipped, rep.ShippedSegments)
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(c, ship.FindingWrongDigest, "pty/typescript", 1) {
		t.Fatalf("verify --shipped after an overwrite of part 1: %+v", c.Findings)
	}
}

func hasFinding(c ship.Comparison, kind, file string, part int) bool {
	for _, f := range c.Findings {
		if f.Kind == kind && f.File == file && f.Part == part {
			return true
		}
	}
	return false
}

// TestShippedComparisonFindsAMissingPartAndExtraBytes: verify --shipped
// of a bucket whose segment was deleted (no Object Lock) and whose file
// has an object past the local end.
func TestShippedComparisonFindsAMissingPartAndExtraBytes(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	s, cfg, _ := shipTo(t, g, 0)
	root := t.TempDir()
	rec := shippedSession(t, root, "s2", s)
	for i := range 3 {
		rec.Output([]byte(fmt.Sprintf("chunk %d\r\n", i)))
		time.Sleep(1200 * time.Millisecond)
	}
	if err := rec.Close(0); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	dir := filepath.Join(root, "run-ship", "s2")
	rep := shippedFolderOK(t, "local folder", dir)
	g.AWS(t, "s3api", "delete-object", "--bucket", g.Bucket, "--key", segmentKey("s2", "pty/typescript", 2))
	parts := len(g.Objects(t, shipPrefix+"segments/run-ship/s2/pty/timing/"))
	extra := testutil.WriteFixture(t, "extra", "appended after the fact")
	g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", segmentKey("s2", "pty/timing", parts+1), "--body", extra, "--checksum-algorithm", "SHA256")
	c, err := ship.Compare(context.Background(), cfg, dir, "run-ship", "s2", rep.Shipped, rep.ShippedSegments)
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(c, ship.FindingMissingPart, "pty/typescript", 2) || !hasFinding(c, ship.FindingExtraBytes, "pty/timing", parts+1) {
		t.Fatalf("findings: %+v", c.Findings)
	}
}

// TestShippingAcrossAnOutageLosesNoSegment: the gateway stopped for 60 s
// mid-session while the session keeps producing; the shipper says behind
// meanwhile, and once the gateway is back the backlog drains and every
// byte is in a segment whose checksum the chain or the bucket vouches for.
func TestShippingAcrossAnOutageLosesNoSegment(t *testing.T) {
	outage := 60 * time.Second
	if testing.Short() {
		t.Skip("the outage lasts 60 s; not in -short")
	}
	g := s3test.Start(t, s3test.Options{})
	s, cfg, log := shipTo(t, g, 0)
	root := t.TempDir()
	rec := shippedSession(t, root, "s3", s)
	rec.Output([]byte("before the outage\r\n"))
	if !testutil.WaitUntil(func() bool { return len(g.Objects(t, shipPrefix+"segments/run-ship/s3/")) >= 2 }) {
		t.Fatal("nothing shipped before the outage")
	}
	g.Stop()
	sawBehind := false
	var lagged ship.Status
	end := time.Now().Add(outage)
	for i := 0; time.Now().Before(end); i++ {
		rec.Output([]byte(fmt.Sprintf("during the outage %d\r\n", i)))
		if st := s.Status(); st.State == ship.StateBehind && st.LagBytes > 0 {
			sawBehind, lagged = true, st
		} else if st.State == ship.StateFailing {
			t.Fatalf("an outage is not a refusal: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if !sawBehind {
		t.Fatalf("the shipper never said behind during a %v outage: %+v", outage, s.Status())
	}
	if lagged.Lag < ship.BehindAfter {
		t.Fatalf("behind with a lag of %v", lagged.Lag)
	}
	g.Start()
	if !testutil.WaitUntil(func() bool { st := s.Status(); return st.State == ship.StateOK && st.LagBytes == 0 }) {
		t.Fatalf("backlog did not drain after the outage: %+v", s.Status())
	}
	if err := rec.Close(0); err != nil {
		t.Fatal(err)
	}
	drain(t, s)
	dir := filepath.Join(root, "run-ship", "s3")
	rep := shippedFolderOK(t, "local folder", dir)
	c, err := ship.Compare(context.Background(), cfg, dir, "run-ship", "s3", rep.Shipped, rep.ShippedSegments)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Findings) != 0 {
		t.Fatalf("after the outage: %+v", c.Findings)
	}
	if !strings.Contains(log.String(), "the store answers again") {
		t.Fatalf("the log does not say the outage ended:\n%s", log.String())
	}
	t.Logf("lag during the outage: %v, %d bytes; %d segments, %d shipped records", lagged.Lag, lagged.LagBytes, c.Segments, len(rep.Shipped))
}

// TestAStartShipsWhatAnEarlierRunLeft: a session recorded while the
// store was down, the shipper stopped before it could ship; the next
// start's resume ships its segments and its files whole.
func TestAStartShipsWhatAnEarlierRunLeft(t *testing.T) {
	g := s3test.Start(t, s3test.Options{})
	g.Stop()
	g.SetEnv(t)
	cfg := ship.Config{Endpoint: g.Endpoint, Bucket: g.Bucket, Region: g.Region, PathStyle: true, Prefix: shipPrefix}
	first, err := ship.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	rec := shippedSession(t, root, "s4", first)
	rec.Output([]byte("recorded while the store was down\r\n"))
	time.Sleep(1200 * time.Millisecond)
	if err := rec.Close(0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	if err := first.Close(ctx); err == nil {
		t.Fatal("a shipper with the store down drained")
	}
	cancel()
	// The next start, the store still down a while: readiness says
	// behind until the earlier run's session is shipped.
	second, _, log := shipTo(t, g, 0)
	resumed := make(chan ship.ResumeReport, 1)
	go func() {
		rep, err := second.Resume(context.Background(), root, []ship.Folder{{Run: "run-ship", Session: "s4"}})
		if err != nil {
			t.Error(err)
		}
		resumed <- rep
	}()
	if !testutil.WaitUntil(func() bool { return second.Status().State == ship.StateBehind }) {
		t.Fatalf("a start whose store is down says %+v", second.Status())
	}
	g.Start()
	var rep ship.ResumeReport
	select {
	case rep = <-resumed:
	case <-time.After(60 * time.Second):
		t.Fatal("the resume did not end after the store came back")
	}
	if st := second.Status(); st.State != ship.StateOK || st.Lag != 0 {
		t.Fatalf("after the resume: %+v", st)
	}
	if rep.Shipped != 1 {
		t.Fatalf("resume: %+v\n%s", rep, log.String())
	}
	dir := filepath.Join(root, "run-ship", "s4")
	local := shippedFolderOK(t, "local folder", dir)
	c, err := ship.Compare(context.Background(), cfg, dir, "run-ship", "s4", local.Shipped, local.ShippedSegments)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Findings) != 0 || c.Whole == 0 {
		t.Fatalf("after the resume: %+v", c)
	}
	// A second start finds it whole and ships nothing.
	if rep, err := second.Resume(context.Background(), root, []ship.Folder{{Run: "run-ship", Session: "s4"}}); err != nil || rep.Shipped != 0 || rep.Checked != 1 {
		t.Fatalf("second resume: %+v, %v", rep, err)
	}
}
