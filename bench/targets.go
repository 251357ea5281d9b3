package bench

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// target is one server under test, started by the benchmark on its own
// loopback port with its own keys and files.
type target struct {
	name    string // A, B or us: the table's column
	addr    string
	hostKey gossh.PublicKey
	cmd     *exec.Cmd
	command func() *exec.Cmd // a new cmd for each start
	dir     string
	log     *os.File
	// records is where the target writes its session records (B's script
	// files, our capture root); emptied between rounds. "" for A.
	records string
}

// scriptCommand is B's ForceCommand: the recording the sidecar replaces,
// with one folder per session so sessions do not overwrite each other.
const scriptCommand = `d=$(mktemp -d %s/s.XXXXXXXX) && exec script -q -f --return --log-io "$d/typescript" --log-timing "$d/timing" --command "${SSH_ORIGINAL_COMMAND:-/bin/bash --login}"`

// sshdConfig is the same for A and B except B's ForceCommand. PrintMotd
// and PrintLastLog are off because the sidecar prints neither; MaxSessions
// and MaxStartups leave room for the concurrent figure.
const sshdConfig = `Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
AuthorizedKeysFile %s
AllowUsers %s
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
AcceptEnv APTL_*
MaxSessions 16
MaxStartups 64:30:128
LogLevel ERROR
`

// startSSHD starts sshd -D -e with a config of its own under dir; with
// record set, its ForceCommand is scriptCommand.
func startSSHD(sshd, name, dir string, acct *account, authorizedKey []byte, record bool) (*target, error) {
	t := &target{name: name, dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	// The privilege separation directory sshd insists on.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, err
	}
	signer, err := newKeyFile(filepath.Join(dir, "ssh_host_ed25519_key"))
	if err != nil {
		return nil, err
	}
	t.hostKey = signer.PublicKey()
	keys, port, err := t.placeClient(authorizedKey)
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(sshdConfig, port, filepath.Join(dir, "ssh_host_ed25519_key"), filepath.Join(dir, "sshd.pid"), keys, acct.name)
	if record {
		t.records = filepath.Join(dir, "sessions")
		if err := os.MkdirAll(t.records, 0o1777); err != nil {
			return nil, err
		}
		os.Chmod(t.records, 0o1777)
		cfg += "ForceCommand " + fmt.Sprintf(scriptCommand, t.records) + "\n"
	}
	cfgPath := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	t.command = func() *exec.Cmd { return exec.Command(sshd, "-D", "-e", "-f", cfgPath) }
	return t, t.start()
}

// startServe starts the server binary with full recording (its default
// classes: pty and pcap) and the local launch adapter; --pcap-host-netns,
// since the benchmark runs on the host's loopback, where pcap is otherwise
// off, and the witness's cost is part of what it measures.
func startServe(bin, dir string, acct *account, authorizedKey []byte) (*target, error) {
	t := &target{name: "us", dir: dir, records: filepath.Join(dir, "captures")}
	state := filepath.Join(dir, "state")
	for _, d := range []string{state, t.records} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	keys, _, err := t.placeClient(authorizedKey)
	if err != nil {
		return nil, err
	}
	t.command = func() *exec.Cmd {
		return exec.Command(bin, "serve", "--listen", t.addr, "--root", t.records, "--state-dir", state,
			"--authorized-keys", keys, "--users", acct.name, "--ready-file", filepath.Join(dir, "ready"),
			"--launch", "local", "--max-conns", "128", "--max-sessions", "128", "--log-level", "warn", "--pcap-host-netns")
	}
	if err := t.start(); err != nil {
		return nil, err
	}
	pub, err := os.ReadFile(filepath.Join(state, "ssh_host_ed25519_key.pub"))
	if err != nil {
		t.stop()
		return nil, err
	}
	if t.hostKey, _, _, _, err = gossh.ParseAuthorizedKey(pub); err != nil {
		t.stop()
		return nil, fmt.Errorf("server host key: %w", err)
	}
	return t, nil
}

// placeClient writes the client's key into the target's authorized_keys
// and picks its port.
func (t *target) placeClient(authorizedKey []byte) (keys string, port int, err error) {
	keys = filepath.Join(t.dir, "authorized_keys")
	if err := os.WriteFile(keys, authorizedKey, 0o644); err != nil {
		return "", 0, err
	}
	if port, err = freePort(); err != nil {
		return "", 0, err
	}
	t.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	return keys, port, nil
}

// start runs the target's command with its output appended to
// <dir>/server.log and waits until the port answers with an SSH banner.
func (t *target) start() error {
	cmd := t.command()
	var err error
	if t.log, err = os.OpenFile(filepath.Join(t.dir, "server.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = t.log, t.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	t.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if bannerAnswers(t.addr) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.stop()
	log, _ := os.ReadFile(t.log.Name())
	return fmt.Errorf("%s did not answer on %s within 20 s; its log:\n%s", t.name, t.addr, log)
}

func bannerAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

// restart stops the target and starts it again on the same port with the
// same keys, configuration and files: a process that has served nothing
// yet.
func (t *target) restart() error {
	t.stop()
	return t.start()
}

// stop ends the target's process group (sshd's sessions or the server's
// shells with it) and waits for the server.
func (t *target) stop() {
	if t.cmd == nil {
		return
	}
	syscall.Kill(-t.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { t.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	t.log.Close()
	t.cmd = nil
}

// clearRecords removes the session records of finished sessions, so that a
// long run does not fill the disk.
func (t *target) clearRecords() error {
	if t.records == "" {
		return nil
	}
	entries, err := os.ReadDir(t.records)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(t.records, e.Name())))
	}
	return errors.Join(errs...)
}
