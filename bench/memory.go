package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// loginShell is the command name of the sessions' shells: their memory is
// the workload's, not the server's, so it is left out for every target.
const loginShell = "bash"

// serverPSS is the proportional set size, in KiB, of the process root and
// its descendants, not counting the login shells and what runs under them.
// For sshd that is the listener and each connection's privileged and user
// processes (and, for B, each session's script); for this server, the
// server process alone.
func serverPSS(root int) (int64, error) {
	children, comm, err := processTree()
	if err != nil {
		return 0, err
	}
	var total int64
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if pid != root && comm[pid] == loginShell {
			continue
		}
		kb, err := pss(pid)
		if err != nil {
			if os.IsNotExist(err) { // exited meanwhile
				continue
			}
			return 0, err
		}
		total += kb
		stack = append(stack, children[pid]...)
	}
	return total, nil
}

// processTree reads every process's parent and command name from /proc.
func processTree() (children map[int][]int, comm map[int]string, err error) {
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, nil, err
	}
	children, comm = map[int][]int{}, map[int]string{}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue // exited
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
		if open < 0 || end < open {
			continue
		}
		fields := strings.Fields(string(stat[end+1:]))
		if len(fields) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(fields[1])
		children[ppid] = append(children[ppid], pid)
		comm[pid] = string(stat[open+1 : end])
	}
	return children, comm, nil
}

// pss reads the Pss line of /proc/<pid>/smaps_rollup, in KiB.
func pss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/smaps_rollup: no Pss line", pid)
}
