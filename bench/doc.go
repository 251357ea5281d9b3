// Package bench measures this server against the OpenSSH recording it
// replaces, side by side on loopback: sshd bare ("A"), sshd whose
// ForceCommand runs script(1) ("B"), and aptl-kali-capture serve built from
// this tree with full recording ("us"). Every figure is taken from each
// target in turn (A, B, us, A, B, us, ...) in the same run, a round at a
// time, and the table gives the medians over the rounds and the ratios
// against A. docs/BENCHMARKS.md has the figures' definitions, the command
// (bench/cmd/sshbench) and the last full run.
//
// The benchmark needs root (sshd, useradd, the server's pcap witness),
// /usr/sbin/sshd (Debian openssh-server, never started as a service here),
// script(1) from util-linux, node with ssh2 (APTL_SSH2_NODE_MODULES), and
// the Go toolchain to build the server. Nothing in `go test ./...` runs it;
// bench_test.go has a smoke test behind APTL_CAPTURE_SLOW_TESTS.
package bench
