package tests

import (
	"context"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/aptl/aptl-kali-capture/broker"
)

// withAlgorithms serves a lab's algorithm setting instead of the defaults.
func withAlgorithms(a broker.Algorithms) harnessOption {
	return func(c *broker.Config) { c.Algorithms = a }
}

// auditReport is what ssh-audit said about one server.
type auditReport struct {
	output   string
	offered  map[string][]string // section (kex, key, enc, mac) → algorithm names, in order
	findings []string            // [fail] and [warn] lines, but "unknown algorithm"
}

var auditAlgLine = regexp.MustCompile(`^\((kex|key|enc|mac)\) (\S+)`)

// runSSHAudit audits the server at addr with Debian's ssh-audit.
func runSSHAudit(t *testing.T, addr string) auditReport {
	t.Helper()
	bin, err := exec.LookPath("ssh-audit")
	if err != nil {
		skipClient(t, "ssh-audit", "ssh-audit (Debian ssh-audit) not installed")
	}
	host, port, _ := net.SplitHostPort(addr)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// ssh-audit exits non-zero on warnings and unknown algorithms; the
	// output is what is judged.
	out, _ := exec.CommandContext(ctx, bin, "-2", "-n", "-t", "10", "-p", port, host).CombinedOutput()
	r := auditReport{output: string(out), offered: map[string][]string{}}
	for _, line := range strings.Split(r.output, "\n") {
		if m := auditAlgLine.FindStringSubmatch(line); m != nil {
			r.offered[m[1]] = append(r.offered[m[1]], m[2])
		}
		// A mark on an algorithm newer than the tool's database is the
		// tool's ignorance, not a weakness (mlkem768x25519-sha256, and the
		// strict-kex marker, are unknown to ssh-audit 2.5).
		if (strings.Contains(line, "[fail]") || strings.Contains(line, "[warn]")) &&
			!strings.Contains(line, "[warn] unknown algorithm") {
			r.findings = append(r.findings, strings.TrimSpace(line))
		}
	}
	if len(r.offered["kex"]) == 0 {
		t.Fatalf("ssh-audit listed no key exchange algorithm; it did not audit the server:\n%s", out)
	}
	return r
}

// TestSSHAuditDefaults audits the server with ssh-audit: the defaults get
// no fail and no warning, and offer exactly the hardened lists with strict
// key exchange; x/crypto's own defaults, served the same way, fail.
func TestSSHAuditDefaults(t *testing.T) {
	t.Run("hardened defaults", func(t *testing.T) {
		h := newHarness(t)
		r := runSSHAudit(t, h.addr)
		if len(r.findings) > 0 {
			t.Errorf("ssh-audit findings:\n%s\n\nfull output:\n%s", strings.Join(r.findings, "\n"), r.output)
		}
		def := broker.DefaultAlgorithms()
		kex := slices.DeleteFunc(slices.Clone(r.offered["kex"]), func(n string) bool { return strings.HasPrefix(n, "kex-strict-") })
		for _, c := range []struct {
			section string
			got     []string
			want    []string
		}{
			{"kex", kex, def.KeyExchanges},
			{"key", r.offered["key"], []string{gossh.KeyAlgoED25519}},
			{"enc", r.offered["enc"], def.Ciphers},
			{"mac", r.offered["mac"], def.MACs},
		} {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("%s offered %q, want %q", c.section, c.got, c.want)
			}
		}
		if !slices.Contains(r.offered["kex"], "kex-strict-s-v00@openssh.com") {
			t.Errorf("strict key exchange not offered: %q", r.offered["kex"])
		}
	})
	t.Run("library defaults fail", func(t *testing.T) {
		var lib gossh.Config
		lib.SetDefaults() // what the server offered before it chose its own lists
		h := newHarness(t, withAlgorithms(broker.Algorithms{KeyExchanges: lib.KeyExchanges, Ciphers: lib.Ciphers, MACs: lib.MACs}))
		r := runSSHAudit(t, h.addr)
		var fails []string
		for _, f := range r.findings {
			if strings.Contains(f, "[fail]") {
				fails = append(fails, f)
			}
		}
		if len(fails) == 0 {
			t.Fatalf("x/crypto's default lists got no [fail]; the audit cannot tell:\n%s", r.output)
		}
		t.Logf("library defaults: %d fail/warn lines, e.g. %q", len(r.findings), fails[0])
	})
}

// TestLegacyClientAlgorithmsNeedSetting: a client that offers only a
// legacy algorithm is refused at key exchange with the defaults, and gets
// in once the lab's setting adds that algorithm.
func TestLegacyClientAlgorithmsNeedSetting(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    broker.AlgorithmKind
		client  gossh.Config
		wantErr string
	}{
		{"diffie-hellman-group14-sha1", broker.KeyExchange,
			gossh.Config{KeyExchanges: []string{"diffie-hellman-group14-sha1"}},
			"no common algorithm for key exchange"},
		// With an AEAD cipher no MAC is negotiated, so the old client is
		// one with a CTR cipher and hmac-sha1, as paramiko 1.x was.
		{"hmac-sha1", broker.MAC,
			gossh.Config{Ciphers: []string{gossh.CipherAES128CTR}, MACs: []string{gossh.HMACSHA1}},
			"no common algorithm for client to server MAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			if err := legacyDial(t, h, tc.client); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("default server: dial error %v, want %q", err, tc.wantErr)
			}
			def := broker.DefaultAlgorithms()
			list, err := broker.ApplyAlgorithmSpec(tc.kind, def.List(tc.kind), "+"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			h = newHarness(t, withAlgorithms(def.With(tc.kind, list)))
			if err := legacyDial(t, h, tc.client); err != nil {
				t.Fatalf("with +%s: %v", tc.name, err)
			}
		})
	}
}

// legacyDial logs in with the client's algorithm lists and runs a command.
func legacyDial(t *testing.T, h *harness, algs gossh.Config) error {
	t.Helper()
	cfg := h.clientConfig(h.user, h.client)
	cfg.Config = algs
	c, err := gossh.Dial("tcp", h.addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	defer s.Close()
	if out, err := s.Output("echo legacy-ok"); err != nil || string(out) != "legacy-ok\n" {
		t.Fatalf("exec: %q, %v", out, err)
	}
	return nil
}
