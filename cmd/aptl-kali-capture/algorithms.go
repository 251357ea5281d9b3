//go:build linux

package main

import (
	"strings"

	"github.com/aptl/aptl-kali-capture/broker"
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
)

// algorithmSetting is one of the transport algorithm lists as a setting.
// Values use OpenSSH's list syntax (sshd_config(5) KexAlgorithms, Ciphers,
// MACs): a list replaces the default, +list appends, -list removes, ^list
// puts first; names may hold * and ? (broker.ApplyAlgorithmSpec).
type algorithmSetting struct {
	kind      broker.AlgorithmKind
	flag, env string
	spec      string // the value given, or the default list
}

// algorithmFlags registers --kex, --ciphers and --macs, each defaulting to
// the broker's hardened list.
func algorithmFlags(e *cliconfig.Flags) []*algorithmSetting {
	def := broker.DefaultAlgorithms()
	settings := []*algorithmSetting{
		{kind: broker.KeyExchange, flag: "kex", env: "APTL_CAPTURE_KEX"},
		{kind: broker.Cipher, flag: "ciphers", env: "APTL_CAPTURE_CIPHERS"},
		{kind: broker.MAC, flag: "macs", env: "APTL_CAPTURE_MACS"},
	}
	for _, s := range settings {
		e.String(&s.spec, s.flag, s.env, strings.Join(def.List(s.kind), ","),
			s.kind.String()+" algorithms offered, in OpenSSH syntax: a,b replaces the list, +a,b appends, -a,b removes, ^a,b puts first (* and ? match)")
	}
	return settings
}

// resolveAlgorithms applies each setting to its default list; an error
// names the setting and the unknown algorithm.
func resolveAlgorithms(e *cliconfig.Flags, settings []*algorithmSetting) (broker.Algorithms, error) {
	def := broker.DefaultAlgorithms()
	algs := def
	for _, s := range settings {
		list, err := broker.ApplyAlgorithmSpec(s.kind, def.List(s.kind), s.spec)
		if err != nil {
			return broker.Algorithms{}, e.SettingError(s.flag, "%v", err)
		}
		algs = algs.With(s.kind, list)
	}
	return algs, nil
}
