package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

func init() {
	register("version", command{summary: "print the version (module version or VCS revision of the build)", run: runVersion})
}

func runVersion(args []string) int {
	e := newEnvFlags("version")
	e.SetSynopsis(progName + " version")
	if err := e.Parse(args); err != nil {
		return failUsage("version", err)
	}
	fmt.Println("aptl-kali-capture " + buildVersion())
	return exitOK
}

// stampedVersion is the version a build stamps in with
// -ldflags "-X main.stampedVersion=VERSION" (compose/build.sh does, from
// git describe): the one a build without VCS data (a staging folder, a
// docker build) can carry.
var stampedVersion string

// buildVersion is the stamped version, else the module version of the
// build (go install ...@v1.2.3), else its VCS revision (a build in a
// checkout, "+dirty" when it had changes), else "devel". It is also the
// SSH banner's version, so it holds only what RFC 4253 allows there:
// printable US-ASCII without spaces or minus signs (sshVersionSafe).
func buildVersion() string {
	if stampedVersion != "" {
		return sshVersionSafe(stampedVersion)
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return sshVersionSafe(v)
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	return sshVersionSafe(rev[:min(12, len(rev))] + dirty)
}

// sshVersionSafe replaces what RFC 4253 section 4.2 forbids in the
// softwareversion of the banner (whitespace, '-', anything outside
// printable US-ASCII) with '.': v0.1.0-2026 becomes v0.1.0.2026.
func sshVersionSafe(v string) string {
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' || r == '-' {
			return '.'
		}
		return r
	}, v)
}
