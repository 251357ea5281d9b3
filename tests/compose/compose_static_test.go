package compose

import (
	"strings"
	"testing"
)

const composeFile = "compose/docker-compose.yml"

// TestComposeBoundary: the shipped Compose file keeps the boundary.
func TestComposeBoundary(t *testing.T) {
	v, err := composeViolations(readFile(t, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, violation := range v {
		t.Error(violation)
	}
}

func service(doc tree, name string) tree { return mapAt(mapAt(doc, "services"), name) }

func appendTo(s tree, key string, items ...any) { s[key] = append(listAt(s, key), items...) }

// TestComposeChecksFire: each check catches its regression on a mutated
// copy of the shipped file, so a check that cannot fail is caught here.
func TestComposeChecksFire(t *testing.T) {
	orig, err := parseDocs(readFile(t, composeFile))
	if err != nil || len(orig) != 1 {
		t.Fatalf("parse %s: %v", composeFile, err)
	}
	mutations := []struct {
		name, want string
		mutate     func(doc tree)
	}{
		{"captures volume in workload", "captures or state volume", func(d tree) {
			appendTo(service(d, "kali"), "volumes", "kali_captures:/mnt/c:ro")
		}},
		{"state volume in workload (long syntax)", "captures or state volume", func(d tree) {
			appendTo(service(d, "kali"), "volumes", tree{"type": "volume", "source": "kali_capture_state", "target": "/x", "read_only": true})
		}},
		{"capture path bind in workload", "captures or state volume", func(d tree) {
			appendTo(service(d, "kali"), "volumes", "/srv/caps:/var/log/aptl/captures")
		}},
		{"agent's files writable", "agent's files (/opt/aptl-agent) are not a read-only mount", func(d tree) {
			service(d, "kali")["volumes"] = []any{"kali_capture_ready:/run/aptl-sidecar:ro", "./local/agent:/opt/aptl-agent"}
		}},
		{"agent's files from the writable root", "are not mounted read-only from the build", func(d tree) {
			service(d, "kali")["volumes"] = []any{"kali_capture_ready:/run/aptl-sidecar:ro"}
		}},
		{"shared PID namespace", "shared PID namespace", func(d tree) { service(d, "kali")["pid"] = "service:kali-capture" }},
		{"host PID namespace on sidecar", "shared PID namespace", func(d tree) { service(d, "kali-capture")["pid"] = "host" }},
		{"Docker socket", "Docker socket", func(d tree) {
			appendTo(service(d, "kali"), "volumes", "/var/run/docker.sock:/var/run/docker.sock")
		}},
		{"privileged workload", "privileged", func(d tree) { service(d, "kali")["privileged"] = true }},
		{"AUDIT_WRITE on workload", "workload: capability AUDIT_WRITE", func(d tree) { appendTo(service(d, "kali"), "cap_add", "AUDIT_WRITE") }},
		{"AUDIT_READ on workload", "workload: capability AUDIT_READ", func(d tree) { appendTo(service(d, "kali"), "cap_add", "CAP_AUDIT_READ") }},
		{"AUDIT_CONTROL on workload", "workload: capability AUDIT_CONTROL", func(d tree) { appendTo(service(d, "kali"), "cap_add", "audit_control") }},
		{"NET_ADMIN on workload", "workload: capability NET_ADMIN", func(d tree) { appendTo(service(d, "kali"), "cap_add", "NET_ADMIN") }},
		{"SYS_PACCT on workload", "workload: capability SYS_PACCT", func(d tree) { appendTo(service(d, "kali"), "cap_add", "SYS_PACCT") }},
		{"workload keeps Docker's default caps", "cap_drop must be ALL", func(d tree) { delete(service(d, "kali"), "cap_drop") }},
		{"port published by workload", "publishes a port", func(d tree) { appendTo(service(d, "kali"), "ports", "127.0.0.1:2223:2222") }},
		{"workload owns the namespace", "network_mode", func(d tree) { delete(service(d, "kali"), "network_mode") }},
		{"sidecar joins the workload", "must own its network namespace", func(d tree) { service(d, "kali-capture")["network_mode"] = "service:kali" }},
		{"sidecar without ports", "publishes no SSH port", func(d tree) { delete(service(d, "kali-capture"), "ports") }},
		{"port on all addresses", "not bound to loopback", func(d tree) { service(d, "kali-capture")["ports"] = []any{"2222:2222"} }},
		{"writable root", "read-only root", func(d tree) { service(d, "kali-capture")["read_only"] = false }},
		{"no no-new-privileges", "no-new-privileges", func(d tree) { delete(service(d, "kali-capture"), "security_opt") }},
		{"no init", "init must be true", func(d tree) { delete(service(d, "kali-capture"), "init") }},
		{"sidecar keeps default caps", "sidecar: cap_drop must be ALL", func(d tree) { delete(service(d, "kali-capture"), "cap_drop") }},
		{"sidecar with SYS_ADMIN", "not a witness", func(d tree) { appendTo(service(d, "kali-capture"), "cap_add", "SYS_ADMIN") }},
		{"sidecar with DAC_OVERRIDE", "not a witness", func(d tree) { appendTo(service(d, "kali-capture"), "cap_add", "CAP_DAC_OVERRIDE") }},
		{"sidecar without NET_RAW", "witness capability NET_RAW not added", func(d tree) {
			service(d, "kali-capture")["cap_add"] = []any{"NET_ADMIN"}
		}},
		{"sidecar without NET_ADMIN", "NET_ADMIN not added (the SSH listener opens without its loopback guard)", func(d tree) {
			service(d, "kali-capture")["cap_add"] = []any{"NET_RAW"}
		}},
		{"sidecar with AUDIT_READ", "AUDIT_READ is inert", func(d tree) { appendTo(service(d, "kali-capture"), "cap_add", "AUDIT_READ") }},
		{"sidecar with AUDIT_CONTROL", "AUDIT_CONTROL is inert", func(d tree) { appendTo(service(d, "kali-capture"), "cap_add", "CAP_AUDIT_CONTROL") }},
		{"sidecar as uid 10001 with cap_add", "gets no capability from cap_add", func(d tree) {
			service(d, "kali-capture")["user"] = "10001:10001"
			mapAt(service(d, "kali"), "environment")["APTL_LAUNCH_AGENT_PEER_UID"] = "10001"
			mapAt(service(d, "kali"), "environment")["APTL_LAUNCH_AGENT_PEER_GID"] = "10001"
		}},
		{"sidecar's user unset", "gets no capability from cap_add", func(d tree) { delete(service(d, "kali-capture"), "user") }},
		{"sidecar as 0:0", "gid of its own", func(d tree) {
			service(d, "kali-capture")["user"] = "0:0"
			mapAt(service(d, "kali"), "environment")["APTL_LAUNCH_AGENT_PEER_GID"] = "0"
		}},
		{"missing healthcheck", "missing healthcheck", func(d tree) { delete(service(d, "kali-capture"), "healthcheck") }},
		{"disabled healthcheck", "missing healthcheck", func(d tree) { mapAt(service(d, "kali-capture"), "healthcheck")["disable"] = true }},
		{"captures not on the sidecar", "kali_captures not mounted", func(d tree) { delete(service(d, "kali-capture"), "volumes") }},
		{"wrong container name", "container_name", func(d tree) { service(d, "kali-capture")["container_name"] = "capture" }},
		{"no restart on workload", "workload: no restart policy", func(d tree) { delete(service(d, "kali"), "restart") }},
		{"no restart on sidecar", "sidecar: no restart policy", func(d tree) { service(d, "kali-capture")["restart"] = "no" }},
		{"local adapter", "APTL_CAPTURE_LAUNCH", func(d tree) { mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_LAUNCH"] = "local" }},
		{"PTY EOF not eof", "APTL_CAPTURE_PTY_EOF", func(d tree) { delete(mapAt(service(d, "kali-capture"), "environment"), "APTL_CAPTURE_PTY_EOF") }},
		{"agent peer uid mismatch", "peer uid/gid", func(d tree) { mapAt(service(d, "kali"), "environment")["APTL_LAUNCH_AGENT_PEER_UID"] = "10001" }},
		{"agent peer gid mismatch", "peer uid/gid", func(d tree) { mapAt(service(d, "kali"), "environment")["APTL_LAUNCH_AGENT_PEER_GID"] = "0" }},
		{"ready volume writable by the workload", "is not read-only", func(d tree) {
			service(d, "kali")["volumes"] = []any{"kali_capture_ready:/run/aptl-sidecar"}
		}},
		{"supervisor does not read the readiness file", "readiness file not shared", func(d tree) {
			delete(mapAt(service(d, "kali"), "environment"), "APTL_AGENT_SIDECAR_READY_FILE")
		}},
		{"readiness file off the shared volume", "readiness file not shared", func(d tree) {
			mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_READY_FILE"] = "/run/aptl-kali-capture-ready"
		}},
		{"orphan exit off", "APTL_AGENT_EXIT_WHEN_ORPHANED", func(d tree) {
			delete(mapAt(service(d, "kali"), "environment"), "APTL_AGENT_EXIT_WHEN_ORPHANED")
		}},
		{"workload killed before a new sidecar serves", "stop_grace_period", func(d tree) { delete(service(d, "kali"), "stop_grace_period") }},
		{"supervisor waits longer than the grace", "stop_grace_period", func(d tree) {
			mapAt(service(d, "kali"), "environment")["APTL_AGENT_STOP_WAIT"] = "30"
		}},
		{"short-form depends_on on the sidecar", "depends_on kali-capture", func(d tree) {
			service(d, "kali")["depends_on"] = []any{"kali-capture"}
		}},
		{"long-form depends_on without restart", "depends_on kali-capture", func(d tree) {
			service(d, "kali")["depends_on"] = tree{"kali-capture": tree{"condition": "service_started"}}
		}},
		{"workload service missing", "are required", func(d tree) { delete(mapAt(d, "services"), "kali") }},
		{"workload on Docker's default seccomp", "seccomp profile", func(d tree) { delete(service(d, "kali"), "security_opt") }},
		{"workload unconfined", "seccomp profile", func(d tree) { service(d, "kali")["security_opt"] = []any{"seccomp:unconfined"} }},
		{"relay missing", "kali-witness is required", func(d tree) { delete(mapAt(d, "services"), "kali-witness") }},
		{"relay in its own PID namespace", "pid and network_mode must be host", func(d tree) { delete(service(d, "kali-witness"), "pid") }},
		{"workload in the host's network", "network_mode", func(d tree) { service(d, "kali")["network_mode"] = "host" }},
		{"relay with SYS_ADMIN", "exactly [AUDIT_CONTROL AUDIT_READ]", func(d tree) { appendTo(service(d, "kali-witness"), "cap_add", "SYS_ADMIN") }},
		{"relay without AUDIT_READ", "exactly [AUDIT_CONTROL AUDIT_READ]", func(d tree) { service(d, "kali-witness")["cap_add"] = []any{"AUDIT_CONTROL"} }},
		{"relay keeps Docker's defaults", "cap_drop ALL", func(d tree) { delete(service(d, "kali-witness"), "cap_drop") }},
		{"relay writable root", "read-only root", func(d tree) { delete(service(d, "kali-witness"), "read_only") }},
		{"relay privileged", "never privileged", func(d tree) { service(d, "kali-witness")["privileged"] = true }},
		{"relay with the captures", "must mount kali_witness_socket and nothing else", func(d tree) {
			appendTo(service(d, "kali-witness"), "volumes", "kali_captures:/c")
		}},
		{"relay publishes a port", "publishes a port", func(d tree) { appendTo(service(d, "kali-witness"), "ports", "127.0.0.1:9:9") }},
		{"relay's socket in the workload", "mounts the witness relay's socket volume", func(d tree) {
			appendTo(service(d, "kali"), "volumes", "kali_witness_socket:/w:ro")
		}},
		{"relay shares the sidecar's gid", "a gid of its own", func(d tree) {
			service(d, "kali-witness")["user"] = "0:10001"
			mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_AUDIT_RELAY_GID"] = "10001"
		}},
		{"sidecar accepts another relay gid", "relay's uid/gid it accepts", func(d tree) {
			mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_AUDIT_RELAY_GID"] = "0"
		}},
		{"relay accepts another peer", "peer uid/gid it accepts", func(d tree) {
			mapAt(service(d, "kali-witness"), "environment")["APTL_WITNESS_RELAY_PEER_GID"] = "0"
		}},
		{"sidecar looks for the socket elsewhere", "is not the sidecar's APTL_CAPTURE_AUDIT_RELAY", func(d tree) {
			mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_AUDIT_RELAY"] = "/run/relay.sock"
		}},
		{"sidecar without the relay's volume", "relay's volume is not mounted", func(d tree) {
			service(d, "kali-capture")["volumes"] = []any{"kali_captures:/var/log/aptl/captures", "kali_capture_state:/var/lib/aptl-kali-capture"}
		}},
		{"audit class off", "audit class and its rules", func(d tree) {
			mapAt(service(d, "kali-capture"), "environment")["APTL_CAPTURE_CLASSES"] = "pty,pcap"
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			doc := deepCopy(orig[0]).(tree)
			m.mutate(doc)
			v, err := composeViolations(marshal(t, doc))
			if err != nil {
				t.Fatal(err)
			}
			expectViolation(t, v, m.want)
		})
	}
}

// TestAgentRunsFromReadOnlyFiles: the image starts the supervisor from the
// folder Compose mounts read-only, and the supervisor starts the agent from
// it, so no program the workload can write is restarted in the agent's
// place.
func TestAgentRunsFromReadOnlyFiles(t *testing.T) {
	const entrypoint = `ENTRYPOINT ["/usr/bin/tini", "-g", "--", "` + agentFilesDir + `/aptl-agent-supervise"]`
	if !strings.Contains(string(readFile(t, "compose/kali/Dockerfile")), entrypoint) {
		t.Errorf("compose/kali/Dockerfile does not start the supervisor from %s (want %s)", agentFilesDir, entrypoint)
	}
	if !strings.Contains(string(readFile(t, "compose/kali/aptl-agent-supervise")), "\nagent="+agentFilesDir+"/aptl-launch-agent\n") {
		t.Errorf("compose/kali/aptl-agent-supervise does not start the agent from %s", agentFilesDir)
	}
}
