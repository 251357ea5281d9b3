package s3test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestGatewayKeepsLockedObjectsAcrossAnOutage holds the harness to what
// the S3 suites rest on: a locked object's checksum is what was sent, a
// delete of its version is refused, and a Stop then Start keeps it.
func TestGatewayKeepsLockedObjectsAcrossAnOutage(t *testing.T) {
	g := Start(t, Options{ObjectLock: true})
	body := filepath.Join(t.TempDir(), "segment")
	if err := os.WriteFile(body, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)
	var put struct {
		VersionID      string `json:"VersionId"`
		ChecksumSHA256 string
	}
	mustJSON(t, g.AWS(t, "s3api", "put-object", "--bucket", g.Bucket, "--key", "r/s/segments/pty/typescript/00000001",
		"--body", body, "--checksum-algorithm", "SHA256", "--object-lock-mode", "COMPLIANCE", "--object-lock-retain-until-date", until), &put)
	// sha256("hello\n") in base64.
	if want := "WJG1tSLV3whtD/CxEPvZ0hu0/HFjrzTQgoai6Eb2vgM="; put.ChecksumSHA256 != want {
		t.Fatalf("checksum %q, want %q", put.ChecksumSHA256, want)
	}
	if _, err := g.TryAWS("s3api", "delete-object", "--bucket", g.Bucket, "--key", "r/s/segments/pty/typescript/00000001", "--version-id", put.VersionID); err == nil {
		t.Fatal("deleting a locked object's version was not refused")
	}
	g.Stop()
	if _, err := g.TryAWS("s3api", "head-bucket", "--bucket", g.Bucket); err == nil {
		t.Fatal("the gateway still answers after Stop")
	}
	g.Start()
	var head struct{ ChecksumSHA256, ObjectLockMode string }
	mustJSON(t, g.AWS(t, "s3api", "head-object", "--bucket", g.Bucket, "--key", "r/s/segments/pty/typescript/00000001", "--checksum-mode", "ENABLED"), &head)
	if head.ChecksumSHA256 != put.ChecksumSHA256 || head.ObjectLockMode != "COMPLIANCE" {
		t.Fatalf("after the outage: %+v", head)
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}
