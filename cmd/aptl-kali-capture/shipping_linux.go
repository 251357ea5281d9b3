package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/aptl/aptl-kali-capture/ship"
)

// shipDrain is how long a stopping serve waits for the sessions' last
// segments and whole files to reach the store; what is left then, the
// next start ships.
const shipDrain = 10 * time.Second

// openShipper starts the shipper when a bucket is set (nil otherwise). It
// does not reach the store: a store down at start is an outage like any.
func openShipper(cfg *serveConfig, log *slog.Logger) (*ship.Shipper, error) {
	if !cfg.shipOn {
		return nil, nil
	}
	s, err := ship.New(context.Background(), cfg.shipConfig, log)
	if err != nil {
		return nil, err
	}
	log.Info("shipping sessions", "endpoint", cfg.shipConfig.Endpoint, "bucket", cfg.shipConfig.Bucket, "prefix", cfg.shipConfig.Prefix,
		"object_lock_retention", cfg.shipConfig.Retention.String())
	return s, nil
}

// closeShipper drains the shipper for at most shipDrain.
func closeShipper(s *ship.Shipper, log *slog.Logger) {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shipDrain)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		log.Warn("shipping stopped before all was shipped; the next start ships the rest", "err", err.Error())
	}
}

// shipState is the shipper's readiness lines: ship=off without a bucket,
// else its state, and the lag from the oldest checkpoint not yet
// acknowledged, in seconds and in the record files' bytes.
func shipState(s *ship.Shipper) string {
	if s == nil {
		return "ship=off\n"
	}
	st := s.Status()
	return fmt.Sprintf("ship=%s\nship_lag_seconds=%d\nship_lag_bytes=%d\n", st.State, int64(st.Lag/time.Second), st.LagBytes)
}

// startRootLogs ships the capture root's lab-wide logs (_audit/,
// _proc-acct/) every ship.RootLogInterval; the returned function stops
// it after one last look, bounded by shipDrain.
func startRootLogs(s *ship.Shipper, root string, log *slog.Logger) (stop func()) {
	if s == nil {
		return func() {}
	}
	logs := s.RootLogs(root)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			logs.Look(ctx)
			select {
			case <-ctx.Done():
				return
			case <-time.After(ship.RootLogInterval):
			}
		}
	}()
	return func() {
		cancel()
		<-done
		last, cancelLast := context.WithTimeout(context.Background(), shipDrain)
		defer cancelLast()
		if err := logs.Look(last); err != nil {
			log.Warn("the lab-wide logs' last bytes were not all shipped; the next start ships them", "err", err.Error())
		}
	}
}
