//go:build linux

package main

import (
	"github.com/aptl/aptl-kali-capture/internal/cliconfig"
	"github.com/aptl/aptl-kali-capture/internal/diskstate"
)

// The capture volume's disk states (internal/diskstate; docs/OPERATING.md, "Disk
// states"): each mark is a percent of the volume's size and a floor in
// MiB, the larger of the two counting.

// maxFloorMB bounds a floor: 1 PiB.
const maxFloorMB = 1 << 30

// bindDiskFlags defines the marks' settings; the function it returns
// checks them and stores them in th once the flags are parsed.
func bindDiskFlags(e *cliconfig.Flags, th *diskstate.Thresholds) func() error {
	d := diskstate.DefaultThresholds()
	var lowMB, criticalMB, resumeMB int
	e.Int(&th.LowPercent, "disk-low-percent", "APTL_CAPTURE_DISK_LOW_PERCENT", d.LowPercent,
		"the capture volume is low (the witnesses stop storing) below this percent of its size free, or below --disk-low-mb")
	e.Int(&lowMB, "disk-low-mb", "APTL_CAPTURE_DISK_LOW_MB", int(d.LowFloor>>20),
		"the capture volume is low below this many MiB free, whatever its size (0: the percent alone)")
	e.Int(&th.CriticalPercent, "disk-critical-percent", "APTL_CAPTURE_DISK_CRITICAL_PERCENT", d.CriticalPercent,
		"the capture volume is critical (new sessions are refused) below this percent of its size free, or below --disk-critical-mb")
	e.Int(&criticalMB, "disk-critical-mb", "APTL_CAPTURE_DISK_CRITICAL_MB", int(d.CriticalFloor>>20),
		"the capture volume is critical below this many MiB free (0: the percent alone)")
	e.Int(&th.ResumePercent, "disk-resume-percent", "APTL_CAPTURE_DISK_RESUME_PERCENT", d.ResumePercent,
		"a low or critical capture volume is ok again (the witnesses resume) at this percent of its size free, and --disk-resume-mb")
	e.Int(&resumeMB, "disk-resume-mb", "APTL_CAPTURE_DISK_RESUME_MB", int(d.ResumeFloor>>20),
		"a low or critical capture volume is ok again at this many MiB free (0: the percent alone)")
	return func() error {
		for _, p := range []struct {
			name string
			v    int
		}{{"disk-critical-percent", th.CriticalPercent}, {"disk-low-percent", th.LowPercent}, {"disk-resume-percent", th.ResumePercent}} {
			if err := cliconfig.CheckRange(e, p.name, p.v, 1, 90); err != nil {
				return err
			}
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"disk-critical-mb", criticalMB}, {"disk-low-mb", lowMB}, {"disk-resume-mb", resumeMB}} {
			if err := cliconfig.CheckRange(e, f.name, f.v, 0, maxFloorMB); err != nil {
				return err
			}
		}
		switch {
		case th.LowPercent <= th.CriticalPercent:
			return e.SettingError("disk-low-percent", "%d: must be above --disk-critical-percent (%d)", th.LowPercent, th.CriticalPercent)
		case th.ResumePercent <= th.LowPercent:
			return e.SettingError("disk-resume-percent", "%d: must be above --disk-low-percent (%d), or a volume at the mark would flap", th.ResumePercent, th.LowPercent)
		}
		if criticalMB != 0 || lowMB != 0 || resumeMB != 0 {
			switch {
			case lowMB <= criticalMB:
				return e.SettingError("disk-low-mb", "%d: must be above --disk-critical-mb (%d), or all three floors 0", lowMB, criticalMB)
			case resumeMB <= lowMB:
				return e.SettingError("disk-resume-mb", "%d: must be above --disk-low-mb (%d), or a volume at the mark would flap", resumeMB, lowMB)
			}
		}
		th.LowFloor, th.CriticalFloor, th.ResumeFloor = int64(lowMB)<<20, int64(criticalMB)<<20, int64(resumeMB)<<20
		return th.Check()
	}
}

// bindBudgetFlags defines the witnesses' budgets across sessions, in
// percent of the capture volume's size (0: no bound).
func bindBudgetFlags(e *cliconfig.Flags, volumePct, runPct *int) func() error {
	e.Int(volumePct, "witness-budget-percent", "APTL_CAPTURE_WITNESS_BUDGET_PERCENT", 50,
		"percent of the capture volume's size the witnesses' files (pcap, audit) of all sessions may take, those found at start included; past it they are gaps (0: no bound)")
	e.Int(runPct, "witness-run-budget-percent", "APTL_CAPTURE_WITNESS_RUN_BUDGET_PERCENT", 25,
		"percent of the capture volume's size the witnesses' files of one run may take (0: no bound)")
	return func() error {
		if err := cliconfig.CheckRange(e, "witness-budget-percent", *volumePct, 0, 100); err != nil {
			return err
		}
		return cliconfig.CheckRange(e, "witness-run-budget-percent", *runPct, 0, 100)
	}
}
