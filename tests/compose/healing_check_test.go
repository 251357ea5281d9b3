package compose

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// healingViolations: the pair heals itself after a sidecar restart. The
// workload's supervisor (compose/kali/aptl-agent-supervise) exits from an
// orphaned network namespace only once the sidecar's readiness file names
// a new sidecar, so the workload must read that file, on the same volume
// the sidecar writes it to, and must not be able to write it (a workload
// that could would fake or hide the sidecar's state).
func healingViolations(w, s tree) []string {
	var v []string
	sidecarVolumes := map[string]bool{}
	for _, m := range composeMounts(s) {
		sidecarVolumes[m.source] = true
	}
	for _, m := range composeMounts(w) {
		if m.source != "" && sidecarVolumes[m.source] && !m.readOnly {
			v = append(v, fmt.Sprintf("workload: volume %s, shared with the sidecar, is not read-only", m.source))
		}
	}
	we, se := envOf(w, "environment"), envOf(s, "environment")
	if we["APTL_AGENT_EXIT_WHEN_ORPHANED"] != "1" {
		v = append(v, "workload: APTL_AGENT_EXIT_WHEN_ORPHANED must be 1 (leave a namespace the sidecar left)")
	}
	sideVol, sideRel := volumeOf(s, se["APTL_CAPTURE_READY_FILE"])
	workVol, workRel := volumeOf(w, we["APTL_AGENT_SIDECAR_READY_FILE"])
	if sideVol == "" || sideVol != workVol || sideRel != workRel {
		v = append(v, fmt.Sprintf("readiness file not shared: sidecar writes %q on volume %q, workload's supervisor reads %q on %q",
			se["APTL_CAPTURE_READY_FILE"], sideVol, we["APTL_AGENT_SIDECAR_READY_FILE"], workVol))
	}
	v = append(v, restartOrderViolations(w)...)
	return append(v, stopGraceViolations(w, we)...)
}

// restartOrderViolations: Compose v2's `restart` restarts the sidecar
// before the workload only along a dependency marked `restart: true`. The
// one network_mode: service:kali-capture implies is; a short-form
// depends_on on the sidecar replaces it with one that is not, and v2 then
// restarts both at once (compose/README.md, "Restarts heal themselves").
func restartOrderViolations(w tree) []string {
	bad := []string{"workload: depends_on kali-capture without restart: true makes Compose v2 restart both at once; " +
		"leave it to network_mode's implicit dependency"}
	switch deps := w["depends_on"].(type) {
	case []any:
		for _, d := range deps {
			if str(d) == "kali-capture" {
				return bad
			}
		}
	case tree:
		if dep, ok := deps["kali-capture"]; ok {
			if long, _ := dep.(tree); long == nil || long["restart"] != true {
				return bad
			}
		}
	}
	return nil
}

// stopGraceViolations: at SIGTERM, with its sidecar stopping too, the
// supervisor waits for a new sidecar for up to its settle plus wait times
// (defaults 2 s and 15 s, compose/kali/aptl-agent-supervise); the engine must
// not SIGKILL it sooner, or the workload's start finds the sidecar stopped
// again (docker-compose restart).
func stopGraceViolations(w tree, env map[string]string) []string {
	seconds := func(name string, def int) int {
		if n, err := strconv.Atoi(env[name]); err == nil {
			return n
		}
		return def
	}
	need := time.Duration(seconds("APTL_AGENT_STOP_SETTLE", 2)+seconds("APTL_AGENT_STOP_WAIT", 15)) * time.Second
	grace, err := time.ParseDuration(str(w["stop_grace_period"]))
	if err != nil || grace <= need {
		return []string{fmt.Sprintf("workload: stop_grace_period %q must exceed the supervisor's stop settle + wait (%v)", str(w["stop_grace_period"]), need)}
	}
	return nil
}

// volumeOf names the mounted volume a file lies on and the file's path
// inside it; "" when no mount holds it.
func volumeOf(svc tree, file string) (volume, rel string) {
	if file == "" {
		return "", ""
	}
	file = path.Clean(file)
	for _, m := range composeMounts(svc) {
		target := path.Clean(m.target)
		if r, ok := strings.CutPrefix(file, target+"/"); ok && m.source != "" {
			return m.source, r
		}
	}
	return "", ""
}
