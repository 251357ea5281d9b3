package compose

import (
	"fmt"
	"path"
	"strings"
)

// The boundary of the Compose deployment (compose/README.md): what a root
// shell in the workload must not get, and what the sidecar must keep.

const (
	workloadService = "kali"
	sidecarService  = "kali-capture"
	sidecarName     = "aptl-kali-capture"
	capturesVolume  = "kali_captures"
	stateVolume     = "kali_capture_state"
	capturesPath    = "/var/log/aptl/captures"
	statePath       = "/var/lib/aptl-kali-capture"
)

// forbiddenWorkloadCaps: the audit witness's capabilities and AUDIT_WRITE
// (a workload holding them could blind the audit witness, read its records,
// change the loginuid that attributes records to sessions, or inject user
// messages into the audit stream), process accounting, NET_ADMIN (in the
// shared network namespace it could redirect the published port), and the
// ones that reach across namespaces. NET_RAW is not here: the workload is
// an attack box and its raw-socket tools need it (compose/README.md, "The
// boundary").
var forbiddenWorkloadCaps = []string{"ALL", "NET_ADMIN", "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "SYS_PACCT", "SYS_ADMIN", "SYS_PTRACE", "SYS_MODULE", "DAC_READ_SEARCH"}

// sidecarCaps are all the sidecar may add, and must, each with what its
// absence costs: NET_RAW opens the pcap engine's packet socket; NET_ADMIN
// lets the SSH listener take its loopback guard on kernels that want it
// for a TCP socket's filter (broker/ingress_linux.go), and serve lowers it
// once the filter is attached.
var sidecarCaps = []struct{ name, without string }{
	{"NET_RAW", "witness capability NET_RAW not added (its witness runs degraded)"},
	{"NET_ADMIN", "capability NET_ADMIN not added (the SSH listener opens without its loopback guard)"},
}

func isSidecarCap(c string) bool {
	for _, s := range sidecarCaps {
		if s.name == c {
			return true
		}
	}
	return false
}

// inertAuditCaps would do nothing in the sidecar (measured): the kernel
// multicasts audit records only in the initial network namespace and takes
// rule and status messages only from the initial PID namespace, and the
// sidecar is in neither.
var inertAuditCaps = []string{"AUDIT_READ", "AUDIT_CONTROL"}

func normCap(c string) string {
	return strings.TrimPrefix(strings.ToUpper(c), "CAP_")
}

// composeViolations parses a Compose file and lists every boundary breach.
func composeViolations(data []byte) ([]string, error) {
	docs, err := parseDocs(data)
	if err != nil {
		return nil, err
	}
	if len(docs) != 1 {
		return nil, fmt.Errorf("want one YAML document, got %d", len(docs))
	}
	services := mapAt(docs[0], "services")
	work, side := mapAt(services, workloadService), mapAt(services, sidecarService)
	var v []string
	if work == nil || side == nil {
		return []string{fmt.Sprintf("services %q and %q are required", workloadService, sidecarService)}, nil
	}
	for name, svc := range services {
		if s, ok := svc.(tree); ok && name != relayService { // relayViolations: the host's namespaces
			v = append(v, sharedNamespaceViolations(name, s)...)
			v = append(v, dockerSocketViolations(name, s)...)
		}
	}
	v = append(v, workloadViolations(work)...)
	v = append(v, sidecarViolations(side)...)
	v = append(v, pairingViolations(work, side)...)
	v = append(v, healingViolations(work, side)...)
	v = append(v, relayViolations(services)...)
	return v, nil
}

func sharedNamespaceViolations(name string, s tree) []string {
	var v []string
	if p := str(s["pid"]); p != "" {
		v = append(v, fmt.Sprintf("%s: shared PID namespace (pid: %s)", name, p))
	}
	if p := str(s["ipc"]); p != "" && p != "private" && p != "none" {
		v = append(v, fmt.Sprintf("%s: shared IPC namespace (ipc: %s)", name, p))
	}
	if s["privileged"] == true {
		v = append(v, name+": privileged")
	}
	if len(listAt(s, "volumes_from")) > 0 {
		v = append(v, name+": volumes_from shares another service's volumes")
	}
	return v
}

func dockerSocketViolations(name string, s tree) []string {
	var v []string
	for _, m := range composeMounts(s) {
		if strings.Contains(m.source, "docker.sock") || strings.Contains(m.target, "docker.sock") || m.source == "/var/run" || m.source == "/run" {
			v = append(v, fmt.Sprintf("%s: Docker socket mounted (%s)", name, m.source))
		}
	}
	return v
}

type mount struct {
	source, target string
	readOnly       bool
}

// composeMounts reads short ("src:dst[:mode]") and long volume syntax.
func composeMounts(s tree) []mount {
	var out []mount
	for _, item := range listAt(s, "volumes") {
		switch m := item.(type) {
		case string:
			parts := strings.Split(withDefaults(m), ":")
			if len(parts) == 1 {
				out = append(out, mount{target: parts[0]})
			} else {
				ro := len(parts) > 2 && containsFold(strings.Split(parts[2], ","), "ro")
				out = append(out, mount{source: parts[0], target: parts[1], readOnly: ro})
			}
		case tree:
			out = append(out, mount{source: withDefaults(str(m["source"])), target: str(m["target"]), readOnly: m["read_only"] == true})
		}
	}
	return out
}

func workloadViolations(w tree) []string {
	var v []string
	for _, m := range composeMounts(w) {
		target := path.Clean(m.target)
		if m.source == capturesVolume || m.source == stateVolume || strings.HasPrefix(target, "/var/log/aptl") || target == statePath {
			v = append(v, fmt.Sprintf("workload: captures or state volume mounted (%s:%s)", m.source, m.target))
		}
	}
	v = append(v, agentFilesViolations(w)...)
	v = append(v, seccompViolations(w)...)
	v = append(v, workloadCapViolations(strList(w, "cap_add"))...)
	if !containsFold(strList(w, "cap_drop"), "ALL") {
		v = append(v, "workload: cap_drop must be ALL (Docker's defaults include NET_RAW and AUDIT_WRITE)")
	}
	if len(listAt(w, "ports")) > 0 || len(listAt(w, "expose")) > 0 {
		v = append(v, "workload: publishes a port (the sidecar owns the network namespace and the lab's port)")
	}
	if nm := str(w["network_mode"]); nm != "service:"+sidecarService {
		v = append(v, fmt.Sprintf("workload: network_mode %q, want service:%s (the sidecar owns the namespace)", nm, sidecarService))
	}
	if r := str(w["restart"]); r == "" || r == "no" {
		v = append(v, "workload: no restart policy")
	}
	return v
}

// agentFilesDir is where the workload's image runs the agent and its
// supervisor from (compose/kali/Dockerfile), and where Compose must mount
// the build's copy read-only: root in the workload could otherwise replace
// the program the supervisor restarts (compose/README.md, "The agent's files").
const agentFilesDir = "/opt/aptl-agent"

func agentFilesViolations(w tree) []string {
	for _, m := range composeMounts(w) {
		if path.Clean(m.target) != agentFilesDir {
			continue
		}
		if !m.readOnly || m.source == "" {
			return []string{fmt.Sprintf("workload: the agent's files (%s) are not a read-only mount", agentFilesDir)}
		}
		return nil
	}
	return []string{fmt.Sprintf("workload: the agent's files (%s) are not mounted read-only from the build", agentFilesDir)}
}

func sidecarViolations(s tree) []string {
	var v []string
	if str(s["container_name"]) != sidecarName {
		v = append(v, "sidecar: container_name must be "+sidecarName+" (the lab's harvest uses it)")
	}
	if nm := str(s["network_mode"]); nm != "" && nm != "bridge" {
		v = append(v, fmt.Sprintf("sidecar: network_mode %q: the sidecar must own its network namespace", nm))
	}
	if s["read_only"] != true {
		v = append(v, "sidecar: no read-only root filesystem")
	}
	if !containsFold(strList(s, "security_opt"), "no-new-privileges:true") && !containsFold(strList(s, "security_opt"), "no-new-privileges") {
		v = append(v, "sidecar: no no-new-privileges")
	}
	if s["init"] != true {
		v = append(v, "sidecar: init must be true")
	}
	if !containsFold(strList(s, "cap_drop"), "ALL") {
		v = append(v, "sidecar: cap_drop must be ALL")
	}
	v = append(v, sidecarCapViolations(strList(s, "cap_add"), str(s["user"]))...)
	v = append(v, healthcheckViolations(s)...)
	v = append(v, sidecarPortViolations(s)...)
	v = append(v, sidecarVolumeViolations(s)...)
	if r := str(s["restart"]); r == "" || r == "no" {
		v = append(v, "sidecar: no restart policy")
	}
	return v
}

func healthcheckViolations(s tree) []string {
	hc := mapAt(s, "healthcheck")
	test := strings.Join(strList(hc, "test"), " ")
	if hc == nil || hc["disable"] == true || !strings.Contains(test, "aptl-kali-capture health") {
		return []string{"sidecar: missing healthcheck `aptl-kali-capture health`"}
	}
	return nil
}

// sidecarPortViolations: the sidecar publishes the lab's SSH port, on
// loopback unless the operator says otherwise.
func sidecarPortViolations(s tree) []string {
	ports := listAt(s, "ports")
	if len(ports) == 0 {
		return []string{"sidecar: publishes no SSH port"}
	}
	var v []string
	for _, p := range ports {
		spec := withDefaults(str(p))
		if m, ok := p.(tree); ok {
			spec = withDefaults(str(m["host_ip"])) + ":" + str(m["published"]) + ":" + str(m["target"])
		}
		if !strings.HasPrefix(spec, "127.") {
			v = append(v, fmt.Sprintf("sidecar: port %q is not bound to loopback by default", spec))
		}
	}
	return v
}

func sidecarVolumeViolations(s tree) []string {
	found := map[string]bool{}
	for _, m := range composeMounts(s) {
		found[m.source+":"+path.Clean(m.target)] = true
	}
	var v []string
	if !found[capturesVolume+":"+capturesPath] {
		v = append(v, "sidecar: "+capturesVolume+" not mounted at "+capturesPath)
	}
	if !found[stateVolume+":"+statePath] {
		v = append(v, "sidecar: "+stateVolume+" not mounted at "+statePath)
	}
	return v
}

// pairingViolations: the two halves of the agent adapter agree.
func pairingViolations(w, s tree) []string {
	we, se := envOf(w, "environment"), envOf(s, "environment")
	var v []string
	if se["APTL_CAPTURE_LAUNCH"] != "agent" {
		v = append(v, "sidecar: APTL_CAPTURE_LAUNCH must be agent (local runs shells in the sidecar)")
	}
	// Set, not left to the default: the tool servers' shell.end() must
	// get its close at once, and the lab's piped commands must all run.
	if se["APTL_CAPTURE_PTY_EOF"] != "eof" {
		v = append(v, "sidecar: APTL_CAPTURE_PTY_EOF must be eof")
	}
	if se["APTL_CAPTURE_AGENT_SOCKET"] != we["APTL_LAUNCH_AGENT_SOCKET"] {
		v = append(v, "agent socket differs between sidecar and workload")
	}
	uid, gid, _ := strings.Cut(str(s["user"]), ":")
	if we["APTL_LAUNCH_AGENT_PEER_UID"] != uid || we["APTL_LAUNCH_AGENT_PEER_GID"] != gid {
		v = append(v, "workload: the agent's peer uid/gid is not the sidecar's user")
	}
	return append(v, peerIDViolations(uid, gid)...)
}

// peerIDViolations: the sidecar's uid and gid are what the agent accepts
// from outside its PID namespace, so they must not both be what every
// container runs as by default (0:0): a root process of another container
// joined to the network namespace would be taken for the sidecar.
func peerIDViolations(uid, gid string) []string {
	if (uid == "" || uid == "0") && (gid == "" || gid == "0") {
		return []string{fmt.Sprintf("sidecar: runs as %q:%q, the default ids of every container's root: give it a gid of its own (the agent's -peer-gid)", uid, gid)}
	}
	return nil
}

// workloadCapViolations names each added capability the workload must not hold.
func workloadCapViolations(added []string) []string {
	var v []string
	for _, c := range added {
		if containsFold(forbiddenWorkloadCaps, normCap(c)) {
			v = append(v, "workload: capability "+normCap(c)+" (audit, accounting, the port's routing or another namespace)")
		}
	}
	return v
}

// sidecarCapViolations: the sidecar adds the pcap witness's and the
// loopback guard's capabilities and no other, and runs as uid 0 so that it
// gets them: Linux gives a
// non-root process no capability from cap_add (measured: uid 1000 with
// --cap-add NET_RAW has CapEff 0), so a non-root sidecar with cap_add
// would look witnessed and run degraded. user is "uid[:gid]".
func sidecarCapViolations(added []string, user string) []string {
	var v []string
	have := map[string]bool{}
	for _, c := range added {
		have[normCap(c)] = true
		switch {
		case containsFold(inertAuditCaps, normCap(c)):
			v = append(v, "sidecar: capability "+normCap(c)+" is inert in the sidecar's own network and PID namespaces (the audit witness cannot live there)")
		case !isSidecarCap(normCap(c)):
			v = append(v, "sidecar: capability "+normCap(c)+" is not a witness's or the loopback guard's")
		}
	}
	for _, c := range sidecarCaps {
		if !have[c.name] {
			v = append(v, "sidecar: "+c.without)
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid != "0" {
		v = append(v, fmt.Sprintf("sidecar: user %q: a non-root process gets no capability from cap_add; run as uid 0 with only the capabilities it needs", user))
	}
	return v
}
