package compose

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

const kubeFile = "compose/kubernetes/aptl-lab.yaml"

// kubeViolations parses the manifests and lists every boundary breach.
func kubeViolations(data []byte) ([]string, error) {
	docs, err := parseDocs(data)
	if err != nil {
		return nil, err
	}
	var pod, svc tree
	for _, d := range docs {
		switch str(d["kind"]) {
		case "Pod":
			pod = d
		case "Service":
			svc = d
		}
	}
	if pod == nil || svc == nil {
		return []string{"a Pod and a Service are required"}, nil
	}
	spec := mapAt(pod, "spec")
	var v []string
	if spec["shareProcessNamespace"] != false {
		v = append(v, "pod: shareProcessNamespace must be false")
	}
	for _, k := range []string{"hostNetwork", "hostPID", "hostIPC"} {
		if spec[k] == true {
			v = append(v, "pod: "+k)
		}
	}
	if spec["automountServiceAccountToken"] != false {
		v = append(v, "pod: automountServiceAccountToken must be false (no API credentials in the workload)")
	}
	side, work := namedContainer(spec, "initContainers", sidecarService), namedContainer(spec, "containers", workloadService)
	if side == nil || work == nil {
		return append(v, "pod: init container kali-capture and container kali are required"), nil
	}
	for _, vol := range listAt(spec, "volumes") {
		if hp := mapAt(vol.(tree), "hostPath"); hp != nil {
			v = append(v, fmt.Sprintf("pod: hostPath volume %s (Docker socket or host files)", str(hp["path"])))
		}
	}
	v = append(v, kubeSidecarViolations(side)...)
	v = append(v, kubeWorkloadViolations(work, side)...)
	v = append(v, kubeServiceViolations(svc, side)...)
	return v, nil
}

func namedContainer(spec tree, key, name string) tree {
	for _, c := range listAt(spec, key) {
		if m, ok := c.(tree); ok && str(m["name"]) == name {
			return m
		}
	}
	return nil
}

func kubeSidecarViolations(c tree) []string {
	var v []string
	if str(c["restartPolicy"]) != "Always" {
		v = append(v, "sidecar: must be a native sidecar (restartPolicy Always)")
	}
	sc := mapAt(c, "securityContext")
	if sc["readOnlyRootFilesystem"] != true {
		v = append(v, "sidecar: no read-only root filesystem")
	}
	if sc["allowPrivilegeEscalation"] != false {
		v = append(v, "sidecar: no no-new-privileges (allowPrivilegeEscalation must be false)")
	}
	if sc["runAsNonRoot"] == true {
		v = append(v, "sidecar: runAsNonRoot: a non-root process gets no capability from capabilities.add (the witnesses need uid 0)")
	}
	caps := mapAt(sc, "capabilities")
	if !containsFold(strList(caps, "drop"), "ALL") {
		v = append(v, "sidecar: capabilities must drop ALL")
	}
	v = append(v, sidecarCapViolations(strList(caps, "add"), str(sc["runAsUser"]))...)
	probe := strings.Join(strList(mapAt(mapAt(c, "readinessProbe"), "exec"), "command"), " ")
	if !strings.Contains(probe, "aptl-kali-capture health") {
		v = append(v, "sidecar: missing readiness probe `aptl-kali-capture health` (it gates the Service)")
	}
	env := envOf(c, "env")
	if env["APTL_CAPTURE_LAUNCH"] != "agent" || env["APTL_CAPTURE_PTY_EOF"] != "hangup" {
		v = append(v, "sidecar: APTL_CAPTURE_LAUNCH=agent and APTL_CAPTURE_PTY_EOF=hangup are required")
	}
	return v
}

// sidecarOnlyVolumes: the volumes the sidecar mounts for captures, state and
// its readiness file, which the workload must never mount.
func sidecarOnlyVolumes(side tree) map[string]bool {
	only := map[string]bool{}
	for _, m := range listAt(side, "volumeMounts") {
		mp := path.Clean(str(m.(tree)["mountPath"]))
		if strings.HasPrefix(mp, "/var/log/aptl") || mp == statePath || mp == "/run" {
			only[str(m.(tree)["name"])] = true
		}
	}
	return only
}

func kubeWorkloadViolations(w, side tree) []string {
	var v []string
	only := sidecarOnlyVolumes(side)
	for _, m := range listAt(w, "volumeMounts") {
		mt := m.(tree)
		if only[str(mt["name"])] || strings.HasPrefix(path.Clean(str(mt["mountPath"])), "/var/log/aptl") {
			v = append(v, fmt.Sprintf("workload: captures or state volume mounted (%s at %s)", str(mt["name"]), str(mt["mountPath"])))
		}
	}
	if len(listAt(w, "ports")) > 0 {
		v = append(v, "workload: declares a port (the Service must reach only the sidecar)")
	}
	sc := mapAt(w, "securityContext")
	if sc["privileged"] == true {
		v = append(v, "workload: privileged")
	}
	caps := mapAt(sc, "capabilities")
	if !containsFold(strList(caps, "drop"), "ALL") {
		v = append(v, "workload: capabilities must drop ALL (runtime defaults include NET_RAW and AUDIT_WRITE)")
	}
	v = append(v, workloadCapViolations(strList(caps, "add"))...)
	env := envOf(w, "env")
	ssc := mapAt(side, "securityContext")
	if env["APTL_LAUNCH_AGENT_PEER_UID"] != str(ssc["runAsUser"]) || env["APTL_LAUNCH_AGENT_PEER_GID"] != str(ssc["runAsGroup"]) {
		v = append(v, "workload: the agent's peer uid/gid is not the sidecar's")
	}
	v = append(v, peerIDViolations(str(ssc["runAsUser"]), str(ssc["runAsGroup"]))...)
	return v
}

// kubeServiceViolations: the Service reaches the sidecar's port, only on
// Ready Pods (the sidecar's health gates it).
func kubeServiceViolations(svc, side tree) []string {
	spec := mapAt(svc, "spec")
	var v []string
	if spec["publishNotReadyAddresses"] == true {
		v = append(v, "service: publishNotReadyAddresses routes to a Pod whose sidecar is not healthy")
	}
	sidePorts := map[string]bool{}
	for _, p := range listAt(side, "ports") {
		sidePorts[str(p.(tree)["name"])], sidePorts[str(p.(tree)["containerPort"])] = true, true
	}
	for _, p := range listAt(spec, "ports") {
		if target := str(p.(tree)["targetPort"]); !sidePorts[target] {
			v = append(v, fmt.Sprintf("service: targetPort %q is not the sidecar's port", target))
		}
	}
	return v
}

func TestKubernetesBoundary(t *testing.T) {
	v, err := kubeViolations(readFile(t, kubeFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, violation := range v {
		t.Error(violation)
	}
}

func podSpec(docs []tree) tree {
	for _, d := range docs {
		if str(d["kind"]) == "Pod" {
			return mapAt(d, "spec")
		}
	}
	return nil
}

// TestKubernetesChecksFire: each check catches its regression on a mutated copy.
func TestKubernetesChecksFire(t *testing.T) {
	orig, err := parseDocs(readFile(t, kubeFile))
	if err != nil {
		t.Fatal(err)
	}
	side := func(d []tree) tree { return namedContainer(podSpec(d), "initContainers", sidecarService) }
	work := func(d []tree) tree { return namedContainer(podSpec(d), "containers", workloadService) }
	mutations := []struct {
		name, want string
		mutate     func(d []tree)
	}{
		{"shared PID namespace", "shareProcessNamespace", func(d []tree) { podSpec(d)["shareProcessNamespace"] = true }},
		{"host network", "hostNetwork", func(d []tree) { podSpec(d)["hostNetwork"] = true }},
		{"Docker socket", "hostPath volume", func(d []tree) {
			podSpec(d)["volumes"] = append(listAt(podSpec(d), "volumes"), tree{"name": "sock", "hostPath": tree{"path": "/var/run/docker.sock"}})
		}},
		{"service account token", "automountServiceAccountToken", func(d []tree) { delete(podSpec(d), "automountServiceAccountToken") }},
		{"captures in workload", "captures or state volume", func(d []tree) {
			work(d)["volumeMounts"] = []any{tree{"name": "captures", "mountPath": "/mnt/c", "readOnly": true}}
		}},
		{"state in workload", "captures or state volume", func(d []tree) {
			work(d)["volumeMounts"] = []any{tree{"name": "state", "mountPath": "/x"}}
		}},
		{"AUDIT_WRITE on workload", "workload: capability AUDIT_WRITE", func(d []tree) {
			caps := mapAt(mapAt(work(d), "securityContext"), "capabilities")
			caps["add"] = append(listAt(caps, "add"), "AUDIT_WRITE")
		}},
		{"AUDIT_CONTROL on workload", "workload: capability AUDIT_CONTROL", func(d []tree) {
			caps := mapAt(mapAt(work(d), "securityContext"), "capabilities")
			caps["add"] = append(listAt(caps, "add"), "AUDIT_CONTROL")
		}},
		{"AUDIT_READ on workload", "workload: capability AUDIT_READ", func(d []tree) {
			caps := mapAt(mapAt(work(d), "securityContext"), "capabilities")
			caps["add"] = append(listAt(caps, "add"), "CAP_AUDIT_READ")
		}},
		{"workload default caps", "workload: capabilities must drop ALL", func(d []tree) { delete(mapAt(mapAt(work(d), "securityContext"), "capabilities"), "drop") }},
		{"privileged workload", "workload: privileged", func(d []tree) { mapAt(work(d), "securityContext")["privileged"] = true }},
		{"port on workload", "workload: declares a port", func(d []tree) { work(d)["ports"] = []any{tree{"containerPort": 2222}} }},
		{"not a native sidecar", "native sidecar", func(d []tree) { delete(side(d), "restartPolicy") }},
		{"writable root", "read-only root", func(d []tree) { mapAt(side(d), "securityContext")["readOnlyRootFilesystem"] = false }},
		{"privilege escalation", "no-new-privileges", func(d []tree) { delete(mapAt(side(d), "securityContext"), "allowPrivilegeEscalation") }},
		{"non-root sidecar", "gets no capability from cap_add", func(d []tree) {
			mapAt(side(d), "securityContext")["runAsUser"] = 10001
			work(d)["env"] = []any{tree{"name": "APTL_LAUNCH_AGENT_PEER_UID", "value": "10001"}, tree{"name": "APTL_LAUNCH_AGENT_PEER_GID", "value": "10001"}}
		}},
		{"sidecar as 0:0", "gid of its own", func(d []tree) {
			mapAt(side(d), "securityContext")["runAsGroup"] = 0
			work(d)["env"] = []any{tree{"name": "APTL_LAUNCH_AGENT_PEER_UID", "value": "0"}, tree{"name": "APTL_LAUNCH_AGENT_PEER_GID", "value": "0"}}
		}},
		{"runAsNonRoot sidecar", "runAsNonRoot", func(d []tree) { mapAt(side(d), "securityContext")["runAsNonRoot"] = true }},
		{"sidecar SYS_ADMIN", "not a witness", func(d []tree) {
			caps := mapAt(mapAt(side(d), "securityContext"), "capabilities")
			caps["add"] = append(listAt(caps, "add"), "SYS_ADMIN")
		}},
		{"sidecar without NET_RAW", "witness capability NET_RAW not added", func(d []tree) {
			mapAt(mapAt(side(d), "securityContext"), "capabilities")["add"] = []any{"NET_ADMIN"}
		}},
		{"sidecar without NET_ADMIN", "NET_ADMIN not added (the SSH listener opens without its loopback guard)", func(d []tree) {
			mapAt(mapAt(side(d), "securityContext"), "capabilities")["add"] = []any{"NET_RAW"}
		}},
		{"sidecar with AUDIT_READ", "AUDIT_READ is inert", func(d []tree) {
			caps := mapAt(mapAt(side(d), "securityContext"), "capabilities")
			caps["add"] = append(listAt(caps, "add"), "AUDIT_READ")
		}},
		{"missing readiness probe", "readiness probe", func(d []tree) { delete(side(d), "readinessProbe") }},
		{"not-ready addresses published", "publishNotReadyAddresses", func(d []tree) { mapAt(d[len(d)-1], "spec")["publishNotReadyAddresses"] = true }},
		{"service to another port", "targetPort", func(d []tree) {
			mapAt(d[len(d)-1], "spec")["ports"] = []any{tree{"port": 2222, "targetPort": 2223}}
		}},
		{"agent peer uid mismatch", "peer uid", func(d []tree) {
			work(d)["env"] = []any{tree{"name": "APTL_LAUNCH_AGENT_PEER_UID", "value": "10001"}, tree{"name": "APTL_LAUNCH_AGENT_PEER_GID", "value": "10001"}}
		}},
		{"agent peer gid mismatch", "peer uid", func(d []tree) {
			work(d)["env"] = []any{tree{"name": "APTL_LAUNCH_AGENT_PEER_UID", "value": "0"}, tree{"name": "APTL_LAUNCH_AGENT_PEER_GID", "value": "0"}}
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			docs := make([]tree, len(orig))
			for i, d := range orig {
				docs[i] = deepCopy(d).(tree)
			}
			m.mutate(docs)
			v, err := kubeViolations(marshal(t, docs...))
			if err != nil {
				t.Fatal(err)
			}
			expectViolation(t, v, m.want)
		})
	}
}
