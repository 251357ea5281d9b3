//go:build linux

package main

import (
	"strings"
	"testing"

	"github.com/aptl/aptl-kali-capture/internal/diskstate"
	"github.com/aptl/aptl-kali-capture/internal/testutil"
)

// TestDiskSettings: the marks' defaults, their environment spellings,
// and an error naming the setting for each value without hysteresis.
func TestDiskSettings(t *testing.T) {
	c, err := parseServeConfig(nil, testutil.MapLookup(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.disk != diskstate.DefaultThresholds() {
		t.Errorf("defaults %+v", c.disk)
	}
	env := map[string]string{"APTL_CAPTURE_DISK_LOW_PERCENT": "20", "APTL_CAPTURE_DISK_LOW_MB": "0",
		"APTL_CAPTURE_DISK_CRITICAL_MB": "0", "APTL_CAPTURE_DISK_RESUME_MB": "0"}
	c, err = parseServeConfig([]string{"--disk-resume-percent", "30"}, testutil.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	want := diskstate.Thresholds{LowPercent: 20, CriticalPercent: 5, ResumePercent: 30}
	if c.disk != want {
		t.Errorf("got %+v, want %+v", c.disk, want)
	}
	var shown []string
	for _, s := range c.settings {
		if strings.HasPrefix(s.name, "disk-") {
			shown = append(shown, s.name+"="+s.value)
		}
	}
	if got := strings.Join(shown, " "); got != "disk-critical-mb=0 disk-critical-percent=5 disk-low-mb=0 disk-low-percent=20 disk-resume-mb=0 disk-resume-percent=30" {
		t.Errorf("--check shows %s", got)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--disk-low-percent", "0"}, "--disk-low-percent / APTL_CAPTURE_DISK_LOW_PERCENT: 0: must be between 1 and 90"},
		{[]string{"--disk-resume-percent", "91"}, "--disk-resume-percent / APTL_CAPTURE_DISK_RESUME_PERCENT: 91: must be between 1 and 90"},
		{[]string{"--disk-low-percent", "5"}, "--disk-low-percent / APTL_CAPTURE_DISK_LOW_PERCENT: 5: must be above --disk-critical-percent (5)"},
		{[]string{"--disk-resume-percent", "10"}, "--disk-resume-percent / APTL_CAPTURE_DISK_RESUME_PERCENT: 10: must be above --disk-low-percent (10)"},
		{[]string{"--disk-critical-mb", "-1"}, "--disk-critical-mb / APTL_CAPTURE_DISK_CRITICAL_MB: -1: must be between 0 and"},
		{[]string{"--disk-low-mb", "64"}, "--disk-low-mb / APTL_CAPTURE_DISK_LOW_MB: 64: must be above --disk-critical-mb (64)"},
		{[]string{"--disk-resume-mb", "256"}, "--disk-resume-mb / APTL_CAPTURE_DISK_RESUME_MB: 256: must be above --disk-low-mb (256)"},
	} {
		_, err := parseServeConfig(bad.args, testutil.MapLookup(nil))
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v: error %v, want %q", bad.args, err, bad.want)
		}
	}
}
