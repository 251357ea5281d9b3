package recorder

// Interval mode's fsync runs beside the copiers. An fsync waits for the
// disk, and measured on the recorder's own benchmark (BenchmarkOutput) one
// per MiB on the copier's path took about 40% of interval mode's
// throughput. Everything that orders the record still happens under the
// session's mutex, in the copier: the typescript, timing and log writes
// (write(2) done before the broker forwards a byte), the pending data
// record, the signed checkpoint. Only the wait for the disk moves to a
// goroutine of its own, started per fsync (an idle session has none), at
// most one per session at a time.

// pendingSync is one fsync of the three record files running beside the
// copiers. err is written before done is closed and read only after.
type pendingSync struct {
	done chan struct{}
	err  error
}

// startSync writes the pending data record and starts an fsync of what
// the files hold now. One already running is waited for first, so the
// durability window stays bounded (2×syncBytes, or syncInterval plus one
// fsync). Callers hold mu.
func (s *Session) startSync() error {
	if err := s.reapSync(true); err != nil {
		return err
	}
	if err := s.chain.Flush(); err != nil {
		return s.fail(err)
	}
	ps := &pendingSync{done: make(chan struct{})}
	files := s.recordFiles()
	go func() {
		// The goroutine never takes mu: Close and startSync wait for
		// done while holding it.
		ps.err = syncFiles(files)
		close(ps.done)
	}()
	s.syncing, s.unsynced = ps, 0
	return nil
}

// reapSync collects the fsync running beside the copiers once it is done,
// waiting for it when wait is set, and makes its failure the session's
// sticky failure. Callers hold mu.
func (s *Session) reapSync(wait bool) error {
	ps := s.syncing
	if ps == nil {
		return nil
	}
	if !wait {
		select {
		case <-ps.done:
		default:
			return nil
		}
	}
	<-ps.done
	s.syncing = nil
	return s.fail(ps.err)
}
