package pcap_test

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// senderEnv makes the test binary the benchmark's traffic generator
// instead of running tests: "addr|size|count". The sender is a process of
// its own so the capturing side's CPU time (the benchmark process for the
// engine, tcpdump's own process) does not include the sending.
const senderEnv = "APTL_PCAP_BENCH_SEND"

// Bounds on what the sender accepts, so a stray environment variable cannot
// make it blast for long.
const (
	maxSendSize  = 9000
	maxSendCount = 10_000_000
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(senderEnv); spec != "" {
		if err := blast(spec); err != nil {
			fmt.Fprintln(os.Stderr, "pcap bench sender:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// blast sends count UDP datagrams of size bytes to addr as fast as one
// socket can, and prints the send time in nanoseconds.
func blast(spec string) error {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		return fmt.Errorf("%s: want addr|size|count, got %d fields", senderEnv, len(parts))
	}
	size, err := strconv.Atoi(parts[1])
	if err != nil || size < 1 || size > maxSendSize {
		return fmt.Errorf("%s: size %q: want 1..%d", senderEnv, parts[1], maxSendSize)
	}
	count, err := strconv.Atoi(parts[2])
	if err != nil || count < 1 || count > maxSendCount {
		return fmt.Errorf("%s: count %q: want 1..%d", senderEnv, parts[2], maxSendCount)
	}
	c, err := net.Dial("udp4", parts[0])
	if err != nil {
		return fmt.Errorf("dial %s: %w", parts[0], err)
	}
	defer c.Close()
	buf := make([]byte, size)
	start := time.Now()
	for i := 0; i < count; i++ {
		if _, err := c.Write(buf); err != nil {
			return fmt.Errorf("send datagram %d: %w", i, err)
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return nil
}
