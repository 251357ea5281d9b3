package pcap

// Received is how many packets the kernel has given the engine's socket
// (PACKET_STATISTICS tp_packets, summed), for the test that an idle
// engine is given none.
func (e *Engine) Received() uint64 {
	e.readStats()
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.received
}
