//go:build linux

package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
)

// setting is one line of `serve --check`: a flag name and its effective value.
type setting struct{ name, value string }

// effectiveSettings lists every serve flag with the value the server will
// use, like `sshd -T`: the algorithm lists as the library will offer them,
// and lists and defaults resolved. No setting holds key material (keys are
// files under --state-dir), so every value can be printed.
func effectiveSettings(e *cliconfig.Flags, c *serveConfig) []setting {
	offered := c.algorithms.Offered()
	resolved := map[string]string{
		"users":      strings.Join(c.users, ","),
		"accept-env": strings.Join(c.acceptEnv, ","),
		"kex":        strings.Join(offered.KeyExchanges, ","),
		"ciphers":    strings.Join(offered.Ciphers, ","),
		"macs":       strings.Join(offered.MACs, ","),
	}
	resolved["ready-file"] = resolveReadyFile(c.readyFile, c.stateDir)
	if c.authorizedKeys == "" {
		resolved["authorized-keys"] = filepath.Join(c.stateDir, authorizedKeysFile)
	}
	var out []setting
	e.FlagSet.VisitAll(func(f *flag.Flag) {
		if f.Name == "check" {
			return
		}
		v, ok := resolved[f.Name]
		if !ok {
			v = f.Value.String()
		}
		out = append(out, setting{f.Name, v})
	})
	return out
}

// printSettings writes the effective settings one per line, and warns on
// stderr about algorithms x/crypto itself classes as insecure.
func printSettings(out, warn io.Writer, c *serveConfig) {
	for _, s := range c.settings {
		fmt.Fprintf(out, "%s %s\n", s.name, s.value)
	}
	if bad := c.algorithms.Insecure(); len(bad) > 0 {
		fmt.Fprintf(warn, "warning: insecure algorithms enabled: %s\n", strings.Join(bad, ","))
	}
}
