package main

// Defaults for a newcomer on a development machine: loopback only, and
// everything the server writes under ./aptl-dev. Containers set
// APTL_CAPTURE_ROOT and APTL_CAPTURE_STATE_DIR to their volumes.
const (
	defaultListen   = "127.0.0.1:2222"
	defaultRoot     = "aptl-dev/captures"
	defaultStateDir = "aptl-dev/state"
)
