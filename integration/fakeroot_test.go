package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRefusesFakeRoot: TestRefusesPodmanUserns's refusal rests on the
// variable Podman sets, but a fake root does not need it: `podman unshare
// env -u _CONTAINERS_USERNS_CONFIGURED sandbash`, a client that starts
// sandbash with a clean environment under `podman unshare`, or plain
// `unshare -r`. There sandbash took itself for root: doctor promised
// root's staging, idmapping and network namespaces, and a run failed
// later on "mkdir /run/sandbash/...: permission denied". It must refuse
// at once, saying why. The test runs the binary under `unshare -r` as a
// normal user (nobody, from the root leg).
func TestRefusesFakeRoot(t *testing.T) {
	dir, err := os.MkdirTemp("", "sbfakeroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := copyBinary(t, dir, "sandbash")
	var prefix []string
	if os.Geteuid() == 0 {
		prefix = []string{"setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"}
	}
	args := append(append([]string(nil), prefix...), "unshare", "-r", "true")
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Skipf("no unprivileged user namespaces here (%v: %s); nothing to refuse", err, out)
	}
	args = append(append([]string(nil), prefix...), "unshare", "-r", bin, "doctor")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "_CONTAINERS_USERNS_CONFIGURED=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 125 || !strings.Contains(string(out), "fake root") || !strings.Contains(string(out), "unshare") {
		t.Errorf("sandbash under `unshare -r`: exit %d (%v), %s; want exit 125 and why", code, err, out)
	}
}
