package recorder

import (
	"errors"

	"github.com/aptl/aptl-kali-capture/internal/vocab"
)

// Shipping off the box (package ship, Options.Shipper): the session's
// stream opens once its folder has its name, each signed checkpoint is a
// point up to which its files are shipped, each segment the store
// acknowledged is a shipped record, and the session's end says whether
// the files go whole too. Shipped records are signed by the checkpoint
// that follows for another reason (bytes, an event, the close): alone they
// make none, or every acknowledgement would sign a checkpoint that is
// shipped and acknowledged in turn, for as long as the session lasts.

// errShipClosed refuses an acknowledgement that arrives after the close
// record: the segment is in the bucket all the same (verify --shipped).
var errShipClosed = errors.New("recorder: session closed; shipped segment not recorded")

// openShipping opens the session's stream, for the folder's final path
// (before it is published there: a stream that cannot open refuses the
// session).
func (s *Session) openShipping() error {
	if s.opts.Shipper == nil {
		return nil
	}
	st, err := s.opts.Shipper.Open(s.runID, s.dirs.sessionID, s.dirs.path, s.shippedRecord)
	if err != nil {
		return err
	}
	s.ship = st
	return nil
}

// startShipping arms the first tick once the folder is published: its
// checkpoint signs the open record, with the session key's certificate in
// it, and is the first point, so the certificate leaves the box first.
func (s *Session) startShipping() {
	if s.ship == nil {
		return
	}
	s.mu.Lock()
	s.armTick()
	s.mu.Unlock()
}

// abandonShipping drops the stream of a session that did not start.
func (s *Session) abandonShipping() {
	if s.ship != nil {
		s.ship.Abandon()
	}
}

// shipPoint hands the checkpoint just written to the stream: the record
// files' sizes it covers, the log's with the checkpoint in it. Callers
// hold mu.
func (s *Session) shipPoint() error {
	if s.ship == nil {
		return nil
	}
	if err := s.chain.Flush(); err != nil {
		return err
	}
	fi, err := s.log.Stat()
	if err != nil {
		return err
	}
	s.ship.Point(map[string]int64{
		vocab.PTYDir + "/" + vocab.TypescriptFile: s.ts.size,
		vocab.PTYDir + "/" + vocab.TimingFile:     s.tm.size,
		vocab.PTYDir + "/" + vocab.LogFile:        fi.Size(),
	})
	return nil
}

// shippedRecord records a segment the store acknowledged (the stream's
// Ack). The record waits for the next checkpoint's signature; the tick
// makes it durable meanwhile.
func (s *Session) shippedRecord(attrs map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errShipClosed
	}
	if err := s.writable(); err != nil {
		return err
	}
	if err := s.fail(s.chain.Append(vocab.TypeShipped, attrs)); err != nil {
		return err
	}
	s.shippedUnsigned++
	s.unsynced++
	s.armTick()
	return nil
}

// signable reports whether anything but shipped records was recorded
// since the last signed head. Callers hold mu.
func (s *Session) signable() bool {
	return s.sinceCheckpoint > 0 || s.chain.Seq()-s.checkpointSeq > s.shippedUnsigned || s.witnessDirty
}

// endShipping tells the stream how the session ended: sealed (the
// closing records written), its files go whole as well.
func (s *Session) endShipping() {
	if s.ship != nil {
		s.ship.End(s.sealed)
	}
}
