package compose

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The Kubernetes manifests (compose/kubernetes/): no cluster runs on these
// machines, so they are validated offline, not run. Every document is
// decoded strictly into the Kubernetes API's own types (an unknown field
// or a value of the wrong type fails, as the API server would refuse it),
// then held to the boundary: the capture volumes only in the sidecar, the
// node's namespaces only in the witness relay, no Docker socket, every
// container's capabilities dropped to what it needs, the sidecar started
// before the workload.

const kubeDir = "compose/kubernetes"

// kubeObjects are the manifests' documents, decoded.
type kubeObjects struct {
	pods       []*corev1.Pod
	daemonSets []*appsv1.DaemonSet
	services   []*corev1.Service
	claims     []*corev1.PersistentVolumeClaim
}

// decodeKube decodes one file's documents strictly by their kind.
func decodeKube(data []byte, into *kubeObjects) error {
	for i, doc := range bytes.Split(data, []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var head struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return fmt.Errorf("document %d: %w", i+1, err)
		}
		var obj any
		switch head.APIVersion + " " + head.Kind {
		case "v1 Pod":
			obj = &corev1.Pod{}
		case "apps/v1 DaemonSet":
			obj = &appsv1.DaemonSet{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "v1 PersistentVolumeClaim":
			obj = &corev1.PersistentVolumeClaim{}
		default:
			return fmt.Errorf("document %d: %s %s is not a kind these manifests use", i+1, head.APIVersion, head.Kind)
		}
		// As the API server's strict field validation: the YAML as JSON
		// (a duplicate key fails), then field names matched exactly (Go's
		// encoding/json would take hostPid for hostPID), unknown ones and
		// duplicates refused, each value of its field's type.
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			return fmt.Errorf("document %d (%s): %w", i+1, head.Kind, err)
		}
		strict, err := kjson.UnmarshalStrict(js, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err == nil && len(strict) > 0 {
			err = errors.Join(strict...)
		}
		if err != nil {
			return fmt.Errorf("document %d (%s): %w", i+1, head.Kind, err)
		}
		switch o := obj.(type) {
		case *corev1.Pod:
			into.pods = append(into.pods, o)
		case *appsv1.DaemonSet:
			into.daemonSets = append(into.daemonSets, o)
		case *corev1.Service:
			into.services = append(into.services, o)
		case *corev1.PersistentVolumeClaim:
			into.claims = append(into.claims, o)
		}
	}
	return nil
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// readKube decodes every manifest of the folder.
func readKube(t *testing.T, dir string) (kubeObjects, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(repoFile(t, dir), "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no manifests in %s", dir)
	}
	var objs kubeObjects
	var all []byte
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := decodeKube(data, &objs); err != nil {
			t.Fatalf("%s: %v", filepath.Base(f), err)
		}
		all = append(append(all, data...), "\n---\n"...)
	}
	return objs, all
}

// kubeViolations lists every boundary breach of the decoded manifests.
func kubeViolations(o kubeObjects) []string {
	if len(o.pods) != 1 || len(o.services) != 1 || len(o.daemonSets) != 1 {
		return []string{"want one lab Pod, one Service and one DaemonSet (the witness relay)"}
	}
	pod, svc, relay := o.pods[0], o.services[0], o.daemonSets[0]
	spec := &pod.Spec
	var v []string
	if spec.ShareProcessNamespace == nil || *spec.ShareProcessNamespace {
		v = append(v, "pod: shareProcessNamespace must be false")
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		v = append(v, "pod: hostNetwork, hostPID or hostIPC (only the witness relay has the node's namespaces)")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		v = append(v, "pod: automountServiceAccountToken must be false (no API credentials in the workload)")
	}
	side, work := container(spec.InitContainers, sidecarService), container(spec.Containers, workloadService)
	if side == nil || work == nil || len(spec.Containers) != 1 || len(spec.InitContainers) != 1 {
		return append(v, "pod: the init container kali-capture and the container kali, and no other, are required")
	}
	v = append(v, hostPathViolations("pod", spec.Volumes, map[string]*corev1.Container{sidecarService: side, workloadService: work})...)
	v = append(v, kubeSidecarViolations(side)...)
	v = append(v, kubeWorkloadViolations(work, side)...)
	v = append(v, kubeServiceViolations(svc, side)...)
	v = append(v, kubeRelayViolations(relay, side)...)
	return v
}

func container(cs []corev1.Container, name string) *corev1.Container {
	for i := range cs {
		if cs[i].Name == name {
			return &cs[i]
		}
	}
	return nil
}

// relaySocketDir is the node's folder of the relay's socket: the one
// hostPath of the deployment, mounted by the relay and the sidecar only.
const relaySocketDir = "/var/lib/aptl-witness"

// hostPathViolations: no hostPath but the relay's socket folder, and that
// one mounted by no container but the sidecar and the relay.
func hostPathViolations(where string, vols []corev1.Volume, cs map[string]*corev1.Container) []string {
	var v []string
	for _, vol := range vols {
		hp := vol.HostPath
		if hp == nil {
			continue
		}
		if path.Clean(hp.Path) != relaySocketDir {
			v = append(v, fmt.Sprintf("%s: hostPath volume %s (Docker socket or host files)", where, hp.Path))
			continue
		}
		for name, c := range cs {
			if name != sidecarService && name != relayService && mounts(c, vol.Name) {
				v = append(v, fmt.Sprintf("%s: container %s mounts the witness relay's socket folder", where, name))
			}
		}
	}
	return v
}

func mounts(c *corev1.Container, volume string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == volume })
}

func capNames(cs []corev1.Capability) []string {
	var out []string
	for _, c := range cs {
		out = append(out, string(c))
	}
	return out
}

func idString(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

func envMap(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func kubeSidecarViolations(c *corev1.Container) []string {
	var v []string
	if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		v = append(v, "sidecar: must be a native sidecar (an init container with restartPolicy Always: started before the workload)")
	}
	sc := c.SecurityContext
	if sc == nil {
		return append(v, "sidecar: no securityContext")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		v = append(v, "sidecar: no read-only root filesystem")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		v = append(v, "sidecar: no no-new-privileges (allowPrivilegeEscalation must be false)")
	}
	if sc.RunAsNonRoot != nil && *sc.RunAsNonRoot {
		v = append(v, "sidecar: runAsNonRoot: a non-root process gets no capability from capabilities.add (the witnesses need uid 0)")
	}
	if sc.Privileged != nil && *sc.Privileged {
		v = append(v, "sidecar: privileged")
	}
	if sc.Capabilities == nil || !containsFold(capNames(sc.Capabilities.Drop), "ALL") {
		v = append(v, "sidecar: capabilities must drop ALL")
	}
	var added []string
	if sc.Capabilities != nil {
		added = capNames(sc.Capabilities.Add)
	}
	v = append(v, sidecarCapViolations(added, idString(sc.RunAsUser))...)
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !strings.Contains(strings.Join(p.Exec.Command, " "), "aptl-kali-capture health") {
		v = append(v, "sidecar: missing readiness probe `aptl-kali-capture health` (it gates the Service)")
	}
	env := envMap(c)
	if env["APTL_CAPTURE_LAUNCH"] != "agent" || env["APTL_CAPTURE_PTY_EOF"] != "eof" {
		v = append(v, "sidecar: APTL_CAPTURE_LAUNCH=agent and APTL_CAPTURE_PTY_EOF=eof are required")
	}
	return v
}

// sidecarOnlyVolumes: the volumes the sidecar mounts for captures, state,
// its readiness file and the relay's socket, which the workload must never
// mount.
func sidecarOnlyVolumes(side *corev1.Container) map[string]bool {
	only := map[string]bool{}
	for _, m := range side.VolumeMounts {
		mp := path.Clean(m.MountPath)
		if strings.HasPrefix(mp, "/var/log/aptl") || mp == statePath || mp == "/run" || mp == relaySocketDir {
			only[m.Name] = true
		}
	}
	return only
}

func kubeWorkloadViolations(w, side *corev1.Container) []string {
	var v []string
	only := sidecarOnlyVolumes(side)
	for _, m := range w.VolumeMounts {
		if only[m.Name] || strings.HasPrefix(path.Clean(m.MountPath), "/var/log/aptl") {
			v = append(v, fmt.Sprintf("workload: captures or state volume mounted (%s at %s)", m.Name, m.MountPath))
		}
	}
	if len(w.Ports) > 0 {
		v = append(v, "workload: declares a port (the Service must reach only the sidecar)")
	}
	sc := w.SecurityContext
	if sc == nil {
		return append(v, "workload: no securityContext")
	}
	if sc.Privileged != nil && *sc.Privileged {
		v = append(v, "workload: privileged")
	}
	if sc.Capabilities == nil || !containsFold(capNames(sc.Capabilities.Drop), "ALL") {
		v = append(v, "workload: capabilities must drop ALL (runtime defaults include NET_RAW and AUDIT_WRITE)")
	}
	if sc.Capabilities != nil {
		v = append(v, workloadCapViolations(capNames(sc.Capabilities.Add))...)
	}
	if p := sc.SeccompProfile; p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil || *p.LocalhostProfile != "aptl/kali-seccomp.json" {
		v = append(v, "workload: seccompProfile must be the pair's (Localhost aptl/kali-seccomp.json: io_uring refused)")
	}
	env := envMap(w)
	ssc := side.SecurityContext
	if ssc == nil || env["APTL_LAUNCH_AGENT_PEER_UID"] != idString(ssc.RunAsUser) || env["APTL_LAUNCH_AGENT_PEER_GID"] != idString(ssc.RunAsGroup) {
		v = append(v, "workload: the agent's peer uid/gid is not the sidecar's")
	}
	if ssc != nil {
		v = append(v, peerIDViolations(idString(ssc.RunAsUser), idString(ssc.RunAsGroup))...)
	}
	return v
}

// kubeServiceViolations: the Service reaches the sidecar's port, only on
// Ready Pods (the sidecar's health gates it).
func kubeServiceViolations(svc *corev1.Service, side *corev1.Container) []string {
	var v []string
	if svc.Spec.PublishNotReadyAddresses {
		v = append(v, "service: publishNotReadyAddresses routes to a Pod whose sidecar is not healthy")
	}
	for _, p := range svc.Spec.Ports {
		ok := slices.ContainsFunc(side.Ports, func(cp corev1.ContainerPort) bool {
			return p.TargetPort.String() == cp.Name || p.TargetPort.IntValue() == int(cp.ContainerPort)
		})
		if !ok {
			v = append(v, fmt.Sprintf("service: targetPort %q is not the sidecar's port", p.TargetPort.String()))
		}
	}
	return v
}

// kubeRelayViolations: the DaemonSet is the relay alone, in the node's PID
// and network namespaces with only the audit capabilities, its socket's
// folder its one volume, and it and the sidecar accept each other's ids.
func kubeRelayViolations(ds *appsv1.DaemonSet, side *corev1.Container) []string {
	spec := &ds.Spec.Template.Spec
	var v []string
	if !spec.HostPID || !spec.HostNetwork {
		v = append(v, "relay: hostPID and hostNetwork must be true (the kernel takes audit rules only from the initial PID namespace and multicasts records only in the initial network namespace)")
	}
	if spec.HostIPC || (spec.ShareProcessNamespace != nil && *spec.ShareProcessNamespace) {
		v = append(v, "relay: hostIPC or shareProcessNamespace")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		v = append(v, "relay: automountServiceAccountToken must be false")
	}
	r := container(spec.Containers, relayService)
	if r == nil || len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		return append(v, "relay: the container kali-witness, and no other, is required")
	}
	v = append(v, hostPathViolations("relay", spec.Volumes, map[string]*corev1.Container{relayService: r})...)
	if len(r.Ports) > 0 {
		v = append(v, "relay: declares a port (it listens on no network)")
	}
	if !slices.Equal(r.Args, []string{"witness-relay"}) {
		v = append(v, "relay: args must be [witness-relay]")
	}
	sc := r.SecurityContext
	if sc == nil {
		return append(v, "relay: no securityContext")
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		(sc.Privileged != nil && *sc.Privileged) {
		v = append(v, "relay: read-only root and no privilege escalation, never privileged")
	}
	var added []string
	if sc.Capabilities != nil {
		for _, c := range capNames(sc.Capabilities.Add) {
			added = append(added, normCap(c))
		}
	}
	slices.Sort(added)
	if sc.Capabilities == nil || !containsFold(capNames(sc.Capabilities.Drop), "ALL") || !slices.Equal(added, relayCaps) {
		v = append(v, fmt.Sprintf("relay: capabilities must drop ALL and add exactly %v, not %v", relayCaps, added))
	}
	if len(r.VolumeMounts) != 1 || len(spec.Volumes) != 1 || spec.Volumes[0].HostPath == nil || path.Clean(spec.Volumes[0].HostPath.Path) != relaySocketDir ||
		r.VolumeMounts[0].Name != spec.Volumes[0].Name {
		v = append(v, "relay: must mount the node's "+relaySocketDir+" and nothing else")
	}
	re, se := envMap(r), envMap(side)
	if sock := re["APTL_WITNESS_RELAY_SOCKET"]; sock == "" || path.Dir(sock) != relaySocketDir || se["APTL_CAPTURE_AUDIT_RELAY"] != sock {
		v = append(v, fmt.Sprintf("relay socket: the relay's %q is not the sidecar's APTL_CAPTURE_AUDIT_RELAY %q", sock, se["APTL_CAPTURE_AUDIT_RELAY"]))
	}
	if !slices.ContainsFunc(side.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == relaySocketDir }) {
		v = append(v, "sidecar: the witness relay's socket folder is not mounted")
	}
	if !slices.Contains(strings.Split(se["APTL_CAPTURE_CLASSES"], ","), "audit") || se["APTL_CAPTURE_AUDIT_RULES"] == "" {
		v = append(v, "sidecar: the audit class and its rules are not selected")
	}
	ssc := side.SecurityContext
	if ssc == nil {
		return v
	}
	rgid := idString(sc.RunAsGroup)
	if idString(sc.RunAsUser) != "0" || rgid == "" || rgid == "0" || rgid == idString(ssc.RunAsGroup) {
		v = append(v, "relay: uid 0 (for its capabilities) with a gid of its own, not 0 or the sidecar's")
	}
	if se["APTL_CAPTURE_AUDIT_RELAY_UID"] != idString(sc.RunAsUser) || se["APTL_CAPTURE_AUDIT_RELAY_GID"] != rgid {
		v = append(v, "sidecar: the relay's uid/gid it accepts are not the relay's")
	}
	if re["APTL_WITNESS_RELAY_PEER_UID"] != idString(ssc.RunAsUser) || re["APTL_WITNESS_RELAY_PEER_GID"] != idString(ssc.RunAsGroup) {
		v = append(v, "relay: the peer uid/gid it accepts are not the sidecar's")
	}
	return v
}

func TestKubernetesBoundary(t *testing.T) {
	objs, _ := readKube(t, kubeDir)
	for _, violation := range kubeViolations(objs) {
		t.Error(violation)
	}
	for _, f := range []string{"README.md", "compose/README.md"} {
		if !strings.Contains(string(readFile(t, f)), "validated offline, not run") {
			t.Errorf("%s does not say the Kubernetes manifests are validated offline, not run", f)
		}
	}
}

// TestKubernetesChecksFire: each check catches its regression on a mutated
// copy, and the strict decoding refuses an unknown field and a wrong type.
func TestKubernetesChecksFire(t *testing.T) {
	_, all := readKube(t, kubeDir)
	orig, err := parseDocs(all)
	if err != nil {
		t.Fatal(err)
	}
	kind := func(d []tree, k string) tree {
		for _, doc := range d {
			if str(doc["kind"]) == k {
				return doc
			}
		}
		t.Fatalf("no %s", k)
		return nil
	}
	podSpec := func(d []tree) tree { return mapAt(kind(d, "Pod"), "spec") }
	relaySpec := func(d []tree) tree { return mapAt(mapAt(mapAt(kind(d, "DaemonSet"), "spec"), "template"), "spec") }
	named := func(spec tree, key, name string) tree {
		for _, c := range listAt(spec, key) {
			if m, ok := c.(tree); ok && str(m["name"]) == name {
				return m
			}
		}
		t.Fatalf("no %s %s", key, name)
		return nil
	}
	side := func(d []tree) tree { return named(podSpec(d), "initContainers", sidecarService) }
	work := func(d []tree) tree { return named(podSpec(d), "containers", workloadService) }
	relay := func(d []tree) tree { return named(relaySpec(d), "containers", relayService) }
	caps := func(c tree) tree { return mapAt(mapAt(c, "securityContext"), "capabilities") }
	addCap := func(c tree, name string) { caps(c)["add"] = append(listAt(caps(c), "add"), name) }
	setEnv := func(c tree, name, value string) {
		for _, e := range listAt(c, "env") {
			if m := e.(tree); str(m["name"]) == name {
				m["value"] = value
				return
			}
		}
		c["env"] = append(listAt(c, "env"), tree{"name": name, "value": value})
	}
	mutations := []struct {
		name, want string
		mutate     func(d []tree)
	}{
		{"unknown field", "unknown field", func(d []tree) { podSpec(d)["hostPid"] = true }},
		{"wrong type", "cannot unmarshal", func(d []tree) { podSpec(d)["hostPID"] = "yes" }},
		{"wrong type in a container", "cannot unmarshal", func(d []tree) { side(d)["ports"] = []any{tree{"containerPort": "ssh"}} }},
		{"shared PID namespace", "shareProcessNamespace", func(d []tree) { podSpec(d)["shareProcessNamespace"] = true }},
		{"host network", "hostNetwork, hostPID or hostIPC", func(d []tree) { podSpec(d)["hostNetwork"] = true }},
		{"host PID", "hostNetwork, hostPID or hostIPC", func(d []tree) { podSpec(d)["hostPID"] = true }},
		{"Docker socket", "hostPath volume /var/run/docker.sock", func(d []tree) {
			podSpec(d)["volumes"] = append(listAt(podSpec(d), "volumes"), tree{"name": "sock", "hostPath": tree{"path": "/var/run/docker.sock"}})
		}},
		{"service account token", "automountServiceAccountToken", func(d []tree) { delete(podSpec(d), "automountServiceAccountToken") }},
		{"captures in workload", "captures or state volume", func(d []tree) {
			work(d)["volumeMounts"] = []any{tree{"name": "captures", "mountPath": "/mnt/c", "readOnly": true}}
		}},
		{"state in workload", "captures or state volume", func(d []tree) {
			work(d)["volumeMounts"] = []any{tree{"name": "state", "mountPath": "/x"}}
		}},
		{"relay socket in workload", "mounts the witness relay's socket folder", func(d []tree) {
			work(d)["volumeMounts"] = []any{tree{"name": "relay-socket", "mountPath": "/w"}}
		}},
		{"AUDIT_WRITE on workload", "workload: capability AUDIT_WRITE", func(d []tree) { addCap(work(d), "AUDIT_WRITE") }},
		{"AUDIT_CONTROL on workload", "workload: capability AUDIT_CONTROL", func(d []tree) { addCap(work(d), "AUDIT_CONTROL") }},
		{"AUDIT_READ on workload", "workload: capability AUDIT_READ", func(d []tree) { addCap(work(d), "CAP_AUDIT_READ") }},
		{"workload default caps", "workload: capabilities must drop ALL", func(d []tree) { delete(caps(work(d)), "drop") }},
		{"privileged workload", "workload: privileged", func(d []tree) { mapAt(work(d), "securityContext")["privileged"] = true }},
		{"workload on the runtime's seccomp", "seccompProfile must be the pair's", func(d []tree) {
			mapAt(work(d), "securityContext")["seccompProfile"] = tree{"type": "RuntimeDefault"}
		}},
		{"port on workload", "workload: declares a port", func(d []tree) { work(d)["ports"] = []any{tree{"containerPort": 2222}} }},
		{"not a native sidecar", "native sidecar", func(d []tree) { delete(side(d), "restartPolicy") }},
		{"sidecar as a second container", "and no other", func(d []tree) {
			podSpec(d)["containers"] = append(listAt(podSpec(d), "containers"), deepCopy(side(d)))
		}},
		{"writable root", "read-only root", func(d []tree) { mapAt(side(d), "securityContext")["readOnlyRootFilesystem"] = false }},
		{"privilege escalation", "no-new-privileges", func(d []tree) { delete(mapAt(side(d), "securityContext"), "allowPrivilegeEscalation") }},
		{"non-root sidecar", "gets no capability from cap_add", func(d []tree) {
			mapAt(side(d), "securityContext")["runAsUser"] = 10001
			setEnv(work(d), "APTL_LAUNCH_AGENT_PEER_UID", "10001")
		}},
		{"sidecar as 0:0", "gid of its own", func(d []tree) {
			mapAt(side(d), "securityContext")["runAsGroup"] = 0
			setEnv(work(d), "APTL_LAUNCH_AGENT_PEER_GID", "0")
			setEnv(relay(d), "APTL_WITNESS_RELAY_PEER_GID", "0")
		}},
		{"runAsNonRoot sidecar", "runAsNonRoot", func(d []tree) { mapAt(side(d), "securityContext")["runAsNonRoot"] = true }},
		{"sidecar SYS_ADMIN", "not a witness", func(d []tree) { addCap(side(d), "SYS_ADMIN") }},
		{"sidecar without NET_RAW", "witness capability NET_RAW not added", func(d []tree) { caps(side(d))["add"] = []any{"NET_ADMIN"} }},
		{"sidecar with AUDIT_READ", "AUDIT_READ is inert", func(d []tree) { addCap(side(d), "AUDIT_READ") }},
		{"missing readiness probe", "readiness probe", func(d []tree) { delete(side(d), "readinessProbe") }},
		{"not-ready addresses published", "publishNotReadyAddresses", func(d []tree) { mapAt(kind(d, "Service"), "spec")["publishNotReadyAddresses"] = true }},
		{"service to another port", "targetPort", func(d []tree) {
			mapAt(kind(d, "Service"), "spec")["ports"] = []any{tree{"port": 2222, "targetPort": 2223}}
		}},
		{"agent peer gid mismatch", "peer uid/gid is not the sidecar's", func(d []tree) { setEnv(work(d), "APTL_LAUNCH_AGENT_PEER_GID", "0") }},
		{"relay in the node's namespaces no more", "hostPID and hostNetwork must be true", func(d []tree) { relaySpec(d)["hostPID"] = false }},
		{"relay with SYS_ADMIN", "add exactly [AUDIT_CONTROL AUDIT_READ]", func(d []tree) { addCap(relay(d), "SYS_ADMIN") }},
		{"relay without AUDIT_READ", "add exactly [AUDIT_CONTROL AUDIT_READ]", func(d []tree) { caps(relay(d))["add"] = []any{"AUDIT_CONTROL"} }},
		{"relay keeps the runtime's defaults", "must drop ALL", func(d []tree) { delete(caps(relay(d)), "drop") }},
		{"relay privileged", "never privileged", func(d []tree) { mapAt(relay(d), "securityContext")["privileged"] = true }},
		{"relay with the node's root", "hostPath volume /", func(d []tree) {
			relaySpec(d)["volumes"] = append(listAt(relaySpec(d), "volumes"), tree{"name": "root", "hostPath": tree{"path": "/"}})
		}},
		{"relay with a port", "declares a port", func(d []tree) { relay(d)["ports"] = []any{tree{"containerPort": 9}} }},
		{"relay shares the sidecar's gid", "a gid of its own", func(d []tree) {
			mapAt(relay(d), "securityContext")["runAsGroup"] = 10001
			setEnv(side(d), "APTL_CAPTURE_AUDIT_RELAY_GID", "10001")
		}},
		{"relay accepts another peer", "peer uid/gid it accepts", func(d []tree) { setEnv(relay(d), "APTL_WITNESS_RELAY_PEER_GID", "0") }},
		{"sidecar accepts another relay", "relay's uid/gid it accepts", func(d []tree) { setEnv(side(d), "APTL_CAPTURE_AUDIT_RELAY_GID", "0") }},
		{"sidecar looks elsewhere for the socket", "is not the sidecar's APTL_CAPTURE_AUDIT_RELAY", func(d []tree) {
			setEnv(side(d), "APTL_CAPTURE_AUDIT_RELAY", "/run/relay.sock")
		}},
		{"audit class off", "audit class and its rules", func(d []tree) { setEnv(side(d), "APTL_CAPTURE_CLASSES", "pty,pcap") }},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			docs := make([]tree, len(orig))
			for i, d := range orig {
				docs[i] = deepCopy(d).(tree)
			}
			m.mutate(docs)
			var objs kubeObjects
			if err := decodeKube(marshal(t, docs...), &objs); err != nil {
				if !strings.Contains(err.Error(), m.want) {
					t.Fatalf("decode: %v, want a violation with %q", err, m.want)
				}
				return
			}
			expectViolation(t, kubeViolations(objs), m.want)
		})
	}
}
