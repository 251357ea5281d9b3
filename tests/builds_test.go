package tests

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Some forty tests run one of the project's programs. Each used to build
// its own copy, a link of about a second on a 2-core machine, so a third
// of the package's time went to linking the same bytes again. Now each
// program and build flavour is built once per test binary, on first use,
// into a folder that TestMain removes; the tests only execute the result.
// A test that needs to change a program file (the trampoline checks
// replace and chmod theirs) copies it first.

// sharedBuilds holds the builds of one test binary.
var sharedBuilds = struct {
	mu   sync.Mutex
	root string // made on first use, 0755 so that uid 65534 may enter
	byID map[string]*sharedBuild
}{byID: map[string]*sharedBuild{}}

type sharedBuild struct {
	once sync.Once
	path string
	err  error
}

// buildSpec names what to build and how; id tells flavours apart.
type buildSpec struct {
	id     string // folder name for this flavour, e.g. "capture-static"
	pkg    string // package path relative to tests/
	noCgo  bool   // CGO_ENABLED=0, as the images and the workload get it
	ldflag string // one -ldflags value, or ""
}

var (
	captureBuild    = buildSpec{id: "capture", pkg: "../cmd/aptl-kali-capture"}
	captureStatic   = buildSpec{id: "capture-static", pkg: "../cmd/aptl-kali-capture", noCgo: true}
	agentStatic     = buildSpec{id: "agent-static", pkg: "../cmd/aptl-launch-agent", noCgo: true}
	wireClientBuild = buildSpec{id: "wireclient-static", pkg: "./clients/wireclient", noCgo: true}
	trampolineBuild = buildSpec{id: "trampoline", pkg: "../cmd/aptl-login-trampoline"}
	// Another build of the trampoline: the server must refuse a program
	// beside it whose build settings differ from its own.
	trampolineOther = buildSpec{id: "trampoline-other", pkg: "../cmd/aptl-login-trampoline", ldflag: "-X main.aptlTestOtherBuild=1"}
)

// built returns the path of spec's program, building it on first use. A
// failed build fails every test that asks for it, each with the output.
func built(tb testing.TB, spec buildSpec) string {
	tb.Helper()
	gobin := goTool(tb)
	sharedBuilds.mu.Lock()
	b := sharedBuilds.byID[spec.id]
	if b == nil {
		b = &sharedBuild{}
		sharedBuilds.byID[spec.id] = b
	}
	sharedBuilds.mu.Unlock()
	b.once.Do(func() { b.path, b.err = buildOnce(gobin, spec) })
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

func buildOnce(gobin string, spec buildSpec) (string, error) {
	root, err := sharedBuildRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, spec.id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	args := []string{"build", "-o", dir + "/"}
	if spec.ldflag != "" {
		args = append(args, "-ldflags="+spec.ldflag)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, append(args, spec.pkg)...)
	cmd.Env = os.Environ()
	if spec.noCgo {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (%s): %v\n%s", spec.pkg, spec.id, err, out)
	}
	path := filepath.Join(dir, filepath.Base(spec.pkg))
	if spec.noCgo {
		if err := checkStatic(path); err != nil {
			return "", err
		}
	}
	return path, nil
}

// checkStatic refuses a program with an ELF interpreter: the workload and
// the scratch images have no dynamic loader.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; the workload and the images need a static binary", filepath.Base(path))
		}
	}
	return nil
}

func sharedBuildRoot() (string, error) {
	sharedBuilds.mu.Lock()
	defer sharedBuilds.mu.Unlock()
	if sharedBuilds.root != "" {
		return sharedBuilds.root, nil
	}
	dir, err := os.MkdirTemp("", "aptl-tests-bin-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	sharedBuilds.root = dir
	return dir, nil
}

// removeSharedBuilds is TestMain's cleanup.
func removeSharedBuilds() {
	sharedBuilds.mu.Lock()
	defer sharedBuilds.mu.Unlock()
	if sharedBuilds.root != "" { // set only by sharedBuildRoot's MkdirTemp
		os.RemoveAll(sharedBuilds.root)
	}
}
