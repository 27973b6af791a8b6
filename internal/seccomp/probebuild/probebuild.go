// Package probebuild builds the seccomp probe (internal/seccomp/probe) for
// tests: a static binary any sandbox can run, container images included.
package probebuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Package is the probe's import path.
const Package = "github.com/sandbash/sandbash/internal/seccomp/probe"

// Build builds the probe into dir (which the caller owns and removes) and
// returns its path. dir and the binary are made readable and executable by
// everyone, so a sandbox running as another user can run it.
func Build(dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
		if _, err2 := os.Stat(goBin); err2 != nil {
			return "", fmt.Errorf("building the seccomp probe needs a Go toolchain (no go on $PATH: %v)", err)
		}
	}
	out := filepath.Join(dir, "sandbash-probe")
	cmd := exec.Command(goBin, "build", "-trimpath", "-o", out, Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the seccomp probe: %v\n%s", err, b)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return out, os.Chmod(out, 0o755)
}
