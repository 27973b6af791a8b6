package integration

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesPodmanUserns: everything under `podman unshare` runs in the
// user's rootless Podman user namespace, where sandbash would be a fake
// root. It must refuse, saying why. Podman's library, which sandbash
// linked for the Podman backend, also moved a program whose name contains
// "podman" there before main; sandbash no longer links it. As a user with
// a rootless Podman running (the unprivileged leg), the test makes that
// case: the binary copied under a name with "podman" in it must start
// where it was started, and run. Then, as any user, it sets the variable
// Podman sets in that namespace.
func TestRefusesPodmanUserns(t *testing.T) {
	bin := copyBinary(t, t.TempDir(), "podman-sandbash")
	pause := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "libpod", "tmp", "pause.pid")
	if _, err := os.Stat(pause); os.Geteuid() != 0 && os.Getenv("XDG_RUNTIME_DIR") != "" && err == nil {
		cmd := exec.Command(bin, "doctor")
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); (ok && ee.ExitCode() == 125) || strings.Contains(string(out), "fake root") {
			t.Errorf("%s exists, and %s, started outside that namespace, went into it: %v, %s", pause, filepath.Base(bin), err, out)
		}
	}
	cmd := exec.Command(bin, "doctor")
	cmd.Env = append(os.Environ(), "_CONTAINERS_USERNS_CONFIGURED=init")
	out, err := cmd.CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 125 || !strings.Contains(string(out), "rootless Podman user namespace") || !strings.Contains(string(out), "podman unshare") {
		t.Errorf("sandbash in a rootless Podman user namespace: exit %d (%v), %s; want exit 125 and why", code, err, out)
	}
}

// copyBinary copies the sandbash under test to dir/name (mode 0755), for
// tests that need it under another name or where another user can run it.
func copyBinary(t *testing.T, dir, name string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	src, err := os.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
