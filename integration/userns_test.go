package integration

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusesPodmanUserns: Podman's library, linked into sandbash, joins
// a normal user's rootless Podman user namespace before main when the
// program's name contains "podman"; so does everything under `podman
// unshare`. There sandbash would be a fake root. It must refuse, saying
// why. As a user with a rootless Podman running (the unprivileged leg),
// the test makes the real case: the binary copied under a name with
// "podman" in it. As root, where Podman joins nothing, it sets the
// variable Podman sets there.
func TestRefusesPodmanUserns(t *testing.T) {
	bin := copyBinary(t, t.TempDir(), "podman-sandbash")
	env := os.Environ()
	pause := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "libpod", "tmp", "pause.pid")
	if _, err := os.Stat(pause); os.Geteuid() == 0 || os.Getenv("XDG_RUNTIME_DIR") == "" || err != nil {
		env = append(env, "_CONTAINERS_USERNS_CONFIGURED=init")
	} else {
		t.Logf("the real case: %s exists, so %s starts in that namespace", pause, filepath.Base(bin))
	}
	cmd := exec.Command(bin, "doctor")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 125 || !strings.Contains(string(out), "rootless Podman user namespace") || !strings.Contains(string(out), `"podman-sandbash"`) {
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
