package compose

import (
	"fmt"
	"path"
	"strings"
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
	return v
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
