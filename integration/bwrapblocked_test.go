package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBwrapBlockedInContainer: sandbash inside a Docker or Podman container
// of the engine's default settings, which has bwrap and all it needs but
// namespaces (Docker's seccomp filter refuses user namespaces; Podman's
// allows them but refuses sethostname in one, and both mask parts of
// /proc). doctor names what is in force and the fix; --backend bwrap is
// refused at once (exit 125) saying so, not when its first sandbox fails;
// auto runs an image through the engine (its socket mounted); auto
// without an image refuses, asking for one; and a container started with
// the options doctor gives runs bwrap sandboxes.
func TestBwrapBlockedInContainer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it hands the workspace to another user and gives a container the engine's socket")
	}
	forEngine(t, func(t *testing.T, e engine, _ *cli) {
		bin := staticBinary(t)
		img := strings.Replace(e.image, "sandbash-test:latest", "sandbash-test-bwrap:1", 1)
		if out, err := exec.Command(e.name, "image", "inspect", img).CombinedOutput(); err != nil {
			t.Fatalf("no test image %s (%v: %s): build the test images (make images, or scripts/deps.sh %s-images)", img, err, out, e.name)
		}
		base := t.TempDir()
		ws := filepath.Join(base, "ws")
		state := filepath.Join(base, "state")          // sandbash's as root
		userState := filepath.Join(base, "user-state") // as uid 1000
		for _, d := range []string{ws, state, userState} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range []string{ws, userState} {
			if err := os.Chown(d, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		sock := map[string]string{"docker": "/var/run/docker.sock", "podman": "/run/podman/podman.sock"}[e.name]
		Engine := map[string]string{"docker": "Docker", "podman": "Podman"}[e.name]

		// agent runs sandbash args in a container of img started with opts,
		// as root or (user) as uid 1000; the workspace and state directory
		// are at their host paths.
		agent := func(user bool, opts []string, args ...string) (string, string, int) {
			t.Helper()
			run := []string{"run", "--rm", "-w", ws,
				"-v", sock + ":" + sock,
				"-v", ws + ":" + ws,
				"-v", filepath.Dir(bin) + ":/opt/sb:ro"}
			if user {
				run = append(run, "--user", "1000:1000", "-v", userState+":"+userState, "-e", "XDG_STATE_HOME="+userState, "-e", "HOME="+userState)
			} else {
				run = append(run, "-v", state+":"+state, "-e", "XDG_STATE_HOME="+state)
			}
			if e.name == "podman" {
				// Podman fails to start a container here without them.
				run = append(run, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
			}
			run = append(append(run, opts...), img, "/opt/sb/sandbash")
			cmd := exec.Command(e.name, append(run, args...)...)
			var out, errOut strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return out.String(), errOut.String(), code
		}
		// What keeps bwrap out of a default container of each engine.
		restriction := map[string]string{
			"docker": "sandbash runs inside a Docker container, where a seccomp filter refuses to create user namespaces",
			"podman": "sandbash runs inside a Podman container, where a seccomp filter is in force",
		}[e.name]
		const fix = "fix: use --backend docker or podman with an image (--image, SANDBASH_IMAGE or devcontainer.json) through the host's engine"

		out, errOut, code := agent(false, nil, "doctor")
		if code != 0 || !strings.Contains(out, "bwrap:  unavailable: bwrap: bubblewrap cannot create a sandbox") || !strings.Contains(out, restriction) ||
			!strings.Contains(out, "parts of /proc are masked") || !strings.Contains(out, fix) || !strings.Contains(out, "\nusable: "+e.name+"; --backend auto uses "+e.name+" when given an image") {
			t.Errorf("doctor in a %s container: exit %d, stderr %q, output:\n%s\nwant bwrap unavailable because %q, %q, and %s usable", Engine, code, errOut, out, restriction, fix, e.name)
		}
		// The options that lift what is in force, as doctor gives them,
		// to sandbash as root and as another user.
		fixes := map[bool]string{}
		for _, user := range []bool{false, true} {
			out, _, _ := agent(user, nil, "doctor")
			_, after, ok := strings.Cut(out, "or start this container with `")
			flags, _, ok2 := strings.Cut(after, "`")
			if !ok || !ok2 {
				t.Fatalf("doctor (as uid 1000: %v) gives no options to start the container with:\n%s", user, out)
			}
			fixes[user] = flags
		}

		// Refused when the backend is made, before any sandbox: the
		// reason is the probe's, not a failed call's (backend.ErrSetup).
		out, errOut, code = agent(false, nil, "run", "--backend", "bwrap", "--", "echo ran")
		if code != 125 || out != "" || !strings.Contains(errOut, "bubblewrap cannot create a sandbox as uid 0 here (exit status 1: bwrap: ") ||
			!strings.Contains(errOut, restriction) || !strings.Contains(errOut, fix) || strings.Contains(errOut, "sandbox setup failed") {
			t.Errorf("--backend bwrap in a %s container: exit %d, output %q, stderr %q; want exit 125, refused before a call, saying %q and %q", Engine, code, out, errOut, restriction, fix)
		}

		out, errOut, code = agent(false, nil, "run", "--backend", "auto", "--image", e.image, "--", "echo ok")
		if code != 0 || out != "ok\n" || !strings.Contains(errOut, "backend auto: using "+e.name+" with image "+e.image) {
			t.Errorf("--backend auto --image %s in a %s container: exit %d, output %q, stderr %q; want ok through %s", e.image, Engine, code, out, errOut, e.name)
		}

		out, errOut, code = agent(false, nil, "run", "--backend", "auto", "--", "echo ran")
		if code != 125 || out != "" || !strings.Contains(errOut, restriction) ||
			!strings.Contains(errOut, e.name+" answers here, but auto has no image to run there: give an image (--image, SANDBASH_IMAGE or devcontainer.json) so auto can use "+e.name) {
			t.Errorf("--backend auto without an image in a %s container: exit %d, output %q, stderr %q; want exit 125, why bwrap cannot work, and to give an image for %s", Engine, code, out, errOut, e.name)
		}

		// doctor's fix works: bwrap sandboxes in a container started so,
		// as the workspace owner, whether sandbash runs as root (which
		// stages mounts: CAP_SYS_ADMIN) or as that user (no capability:
		// the seccomp filters refuse more). A kernel switch against
		// unprivileged user namespaces on this host would be named too,
		// with a host fix this test does not apply.
		if hostRestricts() {
			t.Logf("this host restricts unprivileged user namespaces; not trying %v", fixes)
			return
		}
		for _, user := range []bool{false, true} {
			out, errOut, code = agent(user, strings.Fields(fixes[user]), "run", "--backend", "bwrap", "--", "echo ok; id -u")
			if code != 0 || out != "ok\n1000\n" {
				t.Errorf("--backend bwrap (sandbash as uid 1000: %v) in a %s container started with %s, as doctor says: exit %d, output %q, stderr %q; want ok as uid 1000", user, Engine, fixes[user], code, out, errOut)
			}
		}
		// Root without CAP_SYS_ADMIN cannot stage mounts: refused, saying
		// which capability and how to give it.
		var noAdmin []string
		for _, f := range strings.Fields(fixes[false]) {
			if f == "SYS_ADMIN" && len(noAdmin) > 0 && noAdmin[len(noAdmin)-1] == "--cap-add" {
				noAdmin = noAdmin[:len(noAdmin)-1]
				continue
			}
			noAdmin = append(noAdmin, f)
		}
		out, errOut, code = agent(false, noAdmin, "run", "--backend", "bwrap", "--", "echo ran")
		if code != 125 || out != "" || !strings.Contains(errOut, "needs CAP_SYS_ADMIN") || !strings.Contains(errOut, "--cap-add SYS_ADMIN") {
			t.Errorf("sandbash as root in a %s container started with %v (no CAP_SYS_ADMIN): exit %d, output %q, stderr %q; want exit 125 naming CAP_SYS_ADMIN and --cap-add SYS_ADMIN", Engine, noAdmin, code, out, errOut)
		}
	})
}

// hostRestricts reports whether a kernel switch keeps user namespaces
// from users other than root here.
func hostRestricts() bool {
	for f, blocked := range map[string]string{
		"/proc/sys/kernel/unprivileged_userns_clone":             "0",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1",
		"/proc/sys/user/max_user_namespaces":                     "0",
	} {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == blocked {
			return true
		}
	}
	return false
}
