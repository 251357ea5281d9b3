package compose

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// The witness relay's part of the boundary (compose/docker-compose.yml,
// docs/WITNESSES.md "The witness relay"): the only service in the host's
// PID and network namespaces, with only the audit capabilities, sharing
// one volume, its socket's, with the sidecar alone, and the two agreeing
// on each other's credentials.

const (
	relayService = "kali-witness"
	relayVolume  = "kali_witness_socket"
)

// relayCaps are exactly what the relay adds: rules and status
// (AUDIT_CONTROL), the read-only multicast group (AUDIT_READ).
var relayCaps = []string{"AUDIT_CONTROL", "AUDIT_READ"}

func relayViolations(services tree) []string {
	r := mapAt(services, relayService)
	if r == nil {
		return []string{"service " + relayService + " is required (the audit witness reaches the kernel through it)"}
	}
	side, work := mapAt(services, sidecarService), mapAt(services, workloadService)
	var v []string
	if str(r["pid"]) != "host" || str(r["network_mode"]) != "host" {
		v = append(v, "relay: pid and network_mode must be host (the kernel takes audit rules only from the initial PID namespace and multicasts records only in the initial network namespace)")
	}
	if r["read_only"] != true || !containsFold(strList(r, "security_opt"), "no-new-privileges:true") || r["privileged"] == true {
		v = append(v, "relay: read-only root and no-new-privileges, never privileged")
	}
	added := []string{}
	for _, c := range strList(r, "cap_add") {
		added = append(added, normCap(c))
	}
	slices.Sort(added)
	if !containsFold(strList(r, "cap_drop"), "ALL") || !slices.Equal(added, relayCaps) {
		v = append(v, fmt.Sprintf("relay: capabilities must be cap_drop ALL and exactly %v, not %v", relayCaps, added))
	}
	if len(listAt(r, "ports")) > 0 || len(listAt(r, "expose")) > 0 {
		v = append(v, "relay: publishes a port (it listens on no network)")
	}
	if !slices.Contains(strList(r, "command"), "witness-relay") {
		v = append(v, "relay: command must be witness-relay")
	}
	mounts := composeMounts(r)
	if len(mounts) != 1 || mounts[0].source != relayVolume {
		v = append(v, fmt.Sprintf("relay: must mount %s and nothing else, mounts %v", relayVolume, mounts))
	}
	for _, m := range composeMounts(work) {
		if m.source == relayVolume {
			v = append(v, "workload: mounts the witness relay's socket volume")
		}
	}
	relayDir := ""
	if len(mounts) == 1 {
		relayDir = path.Clean(mounts[0].target)
	}
	return append(v, relayPairingViolations(r, side, relayDir)...)
}

// relayPairingViolations: the sidecar finds the relay's socket on the
// shared volume, selects the audit class, and each side accepts exactly
// the other's uid and gid; the relay's gid is its own.
func relayPairingViolations(r, side tree, relayDir string) []string {
	re, se := envOf(r, "environment"), envOf(side, "environment")
	var v []string
	sock := re["APTL_WITNESS_RELAY_SOCKET"]
	if sock == "" || path.Dir(sock) != relayDir || se["APTL_CAPTURE_AUDIT_RELAY"] != sock {
		v = append(v, fmt.Sprintf("relay socket: the relay's %q (on its volume at %q) is not the sidecar's APTL_CAPTURE_AUDIT_RELAY %q", sock, relayDir, se["APTL_CAPTURE_AUDIT_RELAY"]))
	}
	found := false
	for _, m := range composeMounts(side) {
		found = found || (m.source == relayVolume && path.Clean(m.target) == relayDir)
	}
	if !found {
		v = append(v, "sidecar: the witness relay's volume is not mounted where the relay's socket is")
	}
	if !slices.Contains(strings.Split(se["APTL_CAPTURE_CLASSES"], ","), "audit") || se["APTL_CAPTURE_AUDIT_RULES"] == "" {
		v = append(v, "sidecar: the audit class and its rules are not selected")
	}
	ruid, rgid, _ := strings.Cut(str(r["user"]), ":")
	suid, sgid, _ := strings.Cut(str(side["user"]), ":")
	if ruid != "0" || rgid == "" || rgid == "0" || rgid == sgid {
		v = append(v, fmt.Sprintf("relay: user %q: uid 0 (for its capabilities) with a gid of its own, not 0 or the sidecar's", str(r["user"])))
	}
	if se["APTL_CAPTURE_AUDIT_RELAY_UID"] != ruid || se["APTL_CAPTURE_AUDIT_RELAY_GID"] != rgid {
		v = append(v, "sidecar: the relay's uid/gid it accepts are not the relay's user")
	}
	if re["APTL_WITNESS_RELAY_PEER_UID"] != suid || re["APTL_WITNESS_RELAY_PEER_GID"] != sgid {
		v = append(v, "relay: the peer uid/gid it accepts are not the sidecar's user")
	}
	return v
}
