package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aptl/aptl-kali-capture/integrity"
	"github.com/aptl/aptl-kali-capture/internal/s3test"
	"github.com/aptl/aptl-kali-capture/internal/vocab"
	"github.com/aptl/aptl-kali-capture/recorder"
	"github.com/aptl/aptl-kali-capture/recorder/recordertest"
)

// Shipping's figures (docs/PERFORMANCE.md, "Shipping"), against versitygw
// on loopback on the same machine: the gateway's CPU is the sidecar's
// too, so these are a floor for a store on its own host.
//
//	APTL_VERSITYGW=... go test ./tests -run '^$' -bench 'Shipping' -benchtime 1x -count 5

// BenchmarkShippingLag16Sessions: 16 sessions each print 2 KiB every
// 20 ms for 10 s; the lag of each typescript segment is read back from the
// chain itself, from the checkpoint whose point it ended at to its
// shipped record.
func BenchmarkShippingLag16Sessions(b *testing.B) {
	const sessions, chunk, every, runFor = 16, 2 << 10, 20 * time.Millisecond, 10 * time.Second
	var lags []time.Duration
	for range b.N {
		g := s3test.Start(b, s3test.Options{})
		s, _, _ := shipTo(b, g, 0)
		root := b.TempDir()
		var wg sync.WaitGroup
		recs := make([]*recorder.Session, sessions)
		for i := range recs {
			rec, err := recorder.Create(root, recorder.Meta{RunID: "run-ship", SessionID: fmt.Sprintf("lag-%02d", i)}, recorder.Options{Signer: recordertest.Signer(), Shipper: s})
			if err != nil {
				b.Fatal(err)
			}
			recs[i] = rec
		}
		p := bytes.Repeat([]byte("x"), chunk)
		end := time.Now().Add(runFor)
		for _, rec := range recs {
			wg.Go(func() {
				for t := time.NewTicker(every); time.Now().Before(end); <-t.C {
					rec.Output(p)
				}
			})
		}
		wg.Wait()
		for _, rec := range recs {
			rec.Close(0)
		}
		drain(b, s)
		for i := range recs {
			lags = append(lags, segmentLags(b, filepath.Join(root, "run-ship", fmt.Sprintf("lag-%02d", i)))...)
		}
	}
	slices.Sort(lags)
	if len(lags) == 0 {
		b.Fatal("no shipped typescript segments")
	}
	q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.5), "lag-p50-ms")
	b.ReportMetric(q(0.99), "lag-p99-ms")
	b.ReportMetric(float64(len(lags))/float64(b.N), "segments/op")
}

// segmentLags are, for each typescript segment of the session folder dir,
// the time from the first checkpoint that covers its end to its shipped
// record.
func segmentLags(b *testing.B, dir string) []time.Duration {
	raw, err := os.ReadFile(filepath.Join(dir, vocab.PTYDir, vocab.LogFile))
	if err != nil {
		b.Fatal(err)
	}
	type point struct {
		size int64
		t    time.Time
	}
	var points []point
	var lags []time.Duration
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var r integrity.Record
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		switch r.Type {
		case vocab.TypeCheckpoint:
			n, _ := strconv.ParseInt(r.Attrs[vocab.AttrTSSize], 10, 64)
			points = append(points, point{n, r.Time})
		case vocab.TypeShipped:
			if r.Attrs[vocab.AttrFile] != vocab.PTYDir+"/"+vocab.TypescriptFile {
				continue
			}
			off, _ := strconv.ParseInt(r.Attrs[vocab.AttrShipOffset], 10, 64)
			n, _ := strconv.ParseInt(r.Attrs[vocab.AttrShipLength], 10, 64)
			for _, p := range points {
				if p.size >= off+n {
					lags = append(lags, r.Time.Sub(p.t))
					break
				}
			}
		}
	}
	return lags
}

// BenchmarkShippingThroughput: one session records 128 MiB as fast as
// the recorder takes it; the local rate is the recording's, the upload
// rate from the start until the shipper has every segment and every file
// whole (each byte goes twice).
func BenchmarkShippingThroughput(b *testing.B) {
	const total, chunk = 128 << 20, 64 << 10
	var local, shipped []float64
	for range b.N {
		g := s3test.Start(b, s3test.Options{})
		s, _, _ := shipTo(b, g, 0)
		root := b.TempDir()
		rec, err := recorder.Create(root, recorder.Meta{RunID: "run-ship", SessionID: "rate"}, recorder.Options{Signer: recordertest.Signer(), Shipper: s})
		if err != nil {
			b.Fatal(err)
		}
		p := bytes.Repeat([]byte("y"), chunk)
		start := time.Now()
		for range total / chunk {
			if err := rec.Output(p); err != nil {
				b.Fatal(err)
			}
		}
		if err := rec.Close(0); err != nil {
			b.Fatal(err)
		}
		recorded := time.Since(start)
		drain(b, s)
		all := time.Since(start)
		local = append(local, float64(total)/recorded.Seconds()/1e6)
		shipped = append(shipped, float64(total)/all.Seconds()/1e6)
	}
	b.ReportMetric(median(local), "record-MB/s")
	b.ReportMetric(median(shipped), "shipped-MB/s")
	b.ReportMetric(median(shipped)/median(local), "shipped/recorded")
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
