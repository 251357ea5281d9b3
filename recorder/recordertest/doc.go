// Package recordertest makes sessions for the tests of the packages that
// read them back (evidence, examine, tests): sessions recorded with the
// real recorder from a list of chunks and moved into a harvested run's
// kali-side/ (Record, Linux only, as the recorder's PTY side is), the one
// a sidecar killed mid-session leaves, written record by record through
// the chain's writer (Unfinalized), and the host key that signed them.
// Only tests import it.
package recordertest
