package evidence_test

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/evidence"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
)

// benchSessionBytes is the transcript BenchmarkVerify records: large
// enough that the page cache, not the first read, is what is measured
// each round, and that checkpoints every 16 MiB are as many as a real
// long session has.
const benchSessionBytes = 512 << 20

// BenchmarkVerify measures the verifier over a finalized session of
// benchSessionBytes of output recorded with the real recorder (32 KiB
// chunks, the broker's copy buffer), beside two baselines over the same
// typescript: sha256sum(1), and Go's SHA-256 reading the file (the floor
// of any one pass). Each round runs all three one after the other, so a
// machine shared with other work slows them alike; the metrics are the
// throughput of each (MB/s of typescript) and the ratios of verify to
// them. docs/PERFORMANCE.md ("Performance of verify") gives the figures and the
// command.
func BenchmarkVerify(b *testing.B) {
	signer := testutil.NewSigner()
	s, err := recorder.Create(b.TempDir(), recorder.Meta{RunID: "bench", SessionID: "verify"}, recorder.Options{Signer: signer})
	if err != nil {
		b.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 32<<10/16)
	for n := 0; n < benchSessionBytes; n += len(chunk) {
		if err := s.Output(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(0); err != nil {
		b.Fatal(err)
	}
	ts := filepath.Join(s.Dir(), vocab.PTYDir, vocab.TypescriptFile)
	st, err := os.Stat(ts)
	if err != nil {
		b.Fatal(err)
	}
	sha256sum, err := exec.LookPath("sha256sum")
	if err != nil {
		b.Skip("sha256sum (coreutils) not installed")
	}
	keys := evidence.Keys{Trusted: []gossh.PublicKey{signer.PublicKey()}}
	buf := make([]byte, 1<<20)
	var verify, coreutils, goSHA time.Duration
	timed := func(d *time.Duration, f func()) {
		start := time.Now()
		f()
		*d += time.Since(start)
	}
	b.SetBytes(st.Size())
	for b.Loop() {
		timed(&verify, func() {
			if rep := evidence.Verify(s.Dir(), keys, evidence.Options{}); !rep.OK() {
				b.Fatal(rep.Anomalies)
			}
		})
		timed(&coreutils, func() {
			if out, err := exec.Command(sha256sum, ts).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		})
		timed(&goSHA, func() {
			f, err := os.Open(ts)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if _, err := io.CopyBuffer(sha256.New(), f, buf); err != nil {
				b.Fatal(err)
			}
		})
	}
	mbps := func(d time.Duration) float64 { return float64(st.Size()) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(verify), "verify-MB/s")
	b.ReportMetric(mbps(coreutils), "sha256sum-MB/s")
	b.ReportMetric(mbps(goSHA), "go-sha256-MB/s")
	b.ReportMetric(coreutils.Seconds()/verify.Seconds(), "verify/sha256sum")
	b.ReportMetric(goSHA.Seconds()/verify.Seconds(), "verify/go-sha256")
}
