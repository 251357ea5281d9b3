package compose

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The workload's seccomp profile (compose/kali/seccomp.json): its own, so
// that io_uring is refused to the workload by default (Docker 20.10's
// default profile allows it), with what Docker's default refuses kept.

const workloadSeccomp = "./kali/seccomp.json"

// uringSyscalls are the io_uring syscalls: without io_uring_setup no ring
// exists, and the other two are refused too.
var uringSyscalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}

// seccompViolations: the workload runs with the shipped profile.
func seccompViolations(w tree) []string {
	for _, opt := range strList(w, "security_opt") {
		if v, ok := strings.CutPrefix(withDefaults(opt), "seccomp:"); ok && v == workloadSeccomp {
			return nil
		}
		if v, ok := strings.CutPrefix(withDefaults(opt), "seccomp="); ok && v == workloadSeccomp {
			return nil
		}
	}
	return []string{"workload: security_opt must give its seccomp profile (seccomp:" + workloadSeccomp + "), which refuses io_uring"}
}

type seccompProfile struct {
	DefaultAction string   `json:"defaultAction"`
	Architectures []string `json:"architectures"`
	Syscalls      []struct {
		Names    []string          `json:"names"`
		Action   string            `json:"action"`
		ErrnoRet *int              `json:"errnoRet"`
		Args     []json.RawMessage `json:"args"`
	} `json:"syscalls"`
}

// profileViolations: the profile refuses each io_uring syscall outright
// (no argument condition), and the namespace and mount calls Docker's
// default refuses.
func profileViolations(data []byte) []string {
	var p seccompProfile
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return []string{"seccomp profile: " + err.Error()}
	}
	refused := map[string]bool{}
	for _, s := range p.Syscalls {
		if s.Action == "SCMP_ACT_ERRNO" && len(s.Args) == 0 {
			for _, n := range s.Names {
				refused[n] = true
			}
		}
	}
	var v []string
	for _, n := range append(slices.Clone(uringSyscalls), "unshare", "setns", "mount", "bpf", "keyctl", "perf_event_open", "userfaultfd", "clone3") {
		if !refused[n] {
			v = append(v, fmt.Sprintf("seccomp profile: %s is not refused", n))
		}
	}
	if p.DefaultAction != "SCMP_ACT_ALLOW" && p.DefaultAction != "SCMP_ACT_ERRNO" {
		v = append(v, "seccomp profile: defaultAction "+p.DefaultAction)
	}
	return v
}

func TestWorkloadSeccompProfile(t *testing.T) {
	for _, violation := range profileViolations(readFile(t, "compose/kali/seccomp.json")) {
		t.Error(violation)
	}
	for _, c := range []struct{ name, profile, want string }{
		{"io_uring allowed", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[]}`, "io_uring_setup is not refused"},
		{"io_uring refused only with an argument", `{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["io_uring_setup","io_uring_enter","io_uring_register"],"action":"SCMP_ACT_ERRNO","args":[{"index":0}]}]}`, "io_uring_setup is not refused"},
		{"a field Docker would not read", `{"defaultAction":"SCMP_ACT_ALLOW","syscall":[]}`, "unknown field"},
	} {
		expectViolation(t, profileViolations([]byte(c.profile)), c.want)
	}
}
