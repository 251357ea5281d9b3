package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// loginShell is the command name of the sessions' shells: their memory is
// the workload's, not the server's, so it is left out for every target.
const loginShell = "bash"

// A memory reading is the median of pssSamples samples pssInterval apart,
// taken once the processes counted have stayed the same for all of them.
// One sample is one instant of a server whose size moves on its own: a Go
// server's heap grows and shrinks with its garbage collector and returns
// freed pages to the system in the background, and sshd's processes of
// connections just closed exit a while after the client has gone.
const (
	pssSamples  = 5
	pssInterval = 100 * time.Millisecond
	settleBound = 15 * time.Second
)

// settledPSS is serverPSS read pssSamples times in a row over the same
// processes, the median of those samples. It refuses after settleBound
// with processes still starting or exiting.
func settledPSS(root int) (int64, error) {
	var kbs []int64
	var last []int
	deadline := time.Now().Add(settleBound)
	for {
		kb, pids, err := serverPSS(root)
		if err != nil {
			return 0, err
		}
		if !slices.Equal(pids, last) {
			kbs = kbs[:0] // the process set changed: start over
		}
		last = pids
		kbs = append(kbs, kb)
		if len(kbs) == pssSamples {
			slices.Sort(kbs)
			return kbs[len(kbs)/2], nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the processes of server %d did not settle within %v (now %d of them)", root, settleBound, len(pids))
		}
		time.Sleep(pssInterval)
	}
}

// serverPSS is the proportional set size, in KiB, of the process root and
// its descendants, not counting the login shells and what runs under them,
// and the processes it counted, in ascending order. For sshd that is the
// listener and each connection's privileged and user processes (and, for
// B, each session's script); for this server, the server process alone.
func serverPSS(root int) (int64, []int, error) {
	children, comm, err := processTree()
	if err != nil {
		return 0, nil, err
	}
	var total int64
	var counted []int
	stack := []int{root}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if pid != root && comm[pid] == loginShell {
			continue
		}
		kb, err := pss(pid)
		if err != nil {
			if os.IsNotExist(err) || errors.Is(err, syscall.ESRCH) || errors.Is(err, errNoMemory) { // exited meanwhile (ESRCH: exiting)
				continue
			}
			return 0, nil, err
		}
		total += kb
		counted = append(counted, pid)
		stack = append(stack, children[pid]...)
	}
	slices.Sort(counted)
	return total, counted, nil
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

// errNoMemory is a process caught between its exit and its reaping.
var errNoMemory = errors.New("the process has exited")

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
	// A process that has exited but is not reaped yet has no memory, and
	// its smaps_rollup no lines.
	return 0, fmt.Errorf("/proc/%d/smaps_rollup: no Pss line: %w", pid, errNoMemory)
}
