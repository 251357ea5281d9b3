package bench

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// ssh2Open runs node/open.js: SSH2Opens session opens of node ssh2, the
// tool servers' client, one after the other, each timed from the connect
// to the first command's end marker (as goOpen); the median and p90, and
// the median of the env+pty+shell phase (from authenticated to the shell
// callback: channel open, env, pty-req and shell with their replies).
func (r *runner) ssh2Open(t *target, round int) (map[string]float64, error) {
	host, port, err := net.SplitHostPort(t.addr)
	if err != nil {
		return nil, err
	}
	portNum, _ := strconv.Atoi(port)
	opts, err := json.Marshal(map[string]any{
		"host": host, "port": portNum, "username": r.acct.name, "privateKeyPath": r.keyPath,
		"hostKey": base64.StdEncoding.EncodeToString(t.hostKey.Marshal()), "count": r.opt.SSH2Opens,
		"sessionPrefix": fmt.Sprintf("bench-ssh2-%d", round),
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.opt.SSH2Opens)*30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(r.opt.Repo, "bench", "node", "open.js"), string(opts))
	cmd.Env = append(os.Environ(), "NODE_PATH="+r.opt.NodeModules)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var res struct {
		Opens []struct{ Ready, Phase, Open float64 }
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil || res.Error != "" || runErr != nil {
		return nil, fmt.Errorf("node open.js: %v %s %v; stderr: %s", runErr, res.Error, err, stderr.Bytes())
	}
	var open, phase []float64
	for _, o := range res.Opens {
		open = append(open, o.Open)
		phase = append(phase, o.Phase)
	}
	return map[string]float64{
		"ssh2_open_p50": percentile(open, 50),
		"ssh2_open_p90": percentile(open, 90),
		"ssh2_phase":    percentile(phase, 50),
	}, nil
}
