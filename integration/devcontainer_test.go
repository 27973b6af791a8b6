package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// staticBinary builds sandbash without cgo, so that it runs in the test
// image (bash-static and busybox, no C library).
func staticBinary(t *testing.T) string {
	staticOnce.Do(func() {
		staticBin = filepath.Join(filepath.Dir(binary), "static", "sandbash")
		args := []string{"build", "-o", staticBin}
		if buildTags != "" {
			args = append(args, "-tags", buildTags)
		}
		cmd := exec.Command("go", append(args, "../cmd/sandbash")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticErr = &exec.Error{Name: "go build (CGO_ENABLED=0): " + string(out), Err: err}
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticBin
}

// TestInsideDevcontainer: sandbash in a container that has the engine's
// socket and the workspace bind-mounted from another host path
// (docker-outside-of-docker), as in a devcontainer. The engine runs on
// the host, so sandbash must give it host paths: a call sees the host's
// workspace at the path the agent sees it at, and so the extra paths
// and caches. The container path of the workspace is a host path too,
// holding a decoy: mounted as given, the call would see the decoy. A
// path on the container's own filesystem is refused, saying why.
func TestInsideDevcontainer(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: it hands the workspace to another user and gives a container the engine's socket")
	}
	forEngine(t, func(t *testing.T, e engine, _ *cli) {
		bin := staticBinary(t)
		base := t.TempDir()
		dir := func(name string, files map[string]string) string {
			d := filepath.Join(base, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for f, content := range files {
				if err := os.WriteFile(filepath.Join(d, f), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			return d
		}
		ws := dir("ws", map[string]string{"hello.txt": "host workspace\n"})
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		inside := dir("decoy", map[string]string{"hello.txt": "decoy\n"}) // the workspace's path in the container
		data := dir("data", map[string]string{"d.txt": "readable data\n"})
		state := dir("state", nil)
		cache := dir("state/cache", map[string]string{"c.txt": "cached\n"})
		for _, p := range []string{cache, filepath.Join(cache, "c.txt")} {
			if err := os.Chown(p, 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		sock := map[string]string{"docker": "/var/run/docker.sock", "podman": "/run/podman/podman.sock"}[e.name]

		agent := func(env []string, args ...string) (string, string, int) {
			t.Helper()
			run := []string{"run", "--rm", "-w", inside,
				"-v", sock + ":" + sock,
				"-v", ws + ":" + inside,
				"-v", data + ":/data:ro",
				"-v", state + ":/state",
				"-v", filepath.Dir(bin) + ":/opt/sb:ro"}
			if e.name == "podman" {
				// Podman fails to start a container here without them.
				run = append(run, "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
			}
			for _, v := range env {
				run = append(run, "-e", v)
			}
			run = append(run, e.image, "/opt/sb/sandbash", "run", "--backend", e.name, "--image", e.image)
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
		withState := []string{"XDG_STATE_HOME=/state"}

		out, errOut, code := agent(withState, "--readable", "/data", "--cache-dir", "/state/cache:/home/sandbash/c", "--",
			"pwd; cat hello.txt /data/d.txt ~/c/c.txt; echo made > made.txt; echo more >> ~/c/c.txt; id -u")
		want := inside + "\nhost workspace\nreadable data\ncached\n1000\n"
		if code != 0 || out != want {
			t.Fatalf("a call through sandbash in a %s container: exit %d, output %q, stderr %s; want %q", e.name, code, out, errOut, want)
		}
		if b, err := os.ReadFile(filepath.Join(ws, "made.txt")); err != nil || string(b) != "made\n" {
			t.Errorf("the call's file in the host workspace: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(inside, "made.txt")); err == nil {
			t.Error("the call wrote to the host path the workspace has inside the container, not to the workspace")
		}
		if b, _ := os.ReadFile(filepath.Join(state, "cache", "c.txt")); string(b) != "cached\n" {
			t.Errorf("the host's cache changed: %q", b)
		}
		if runs, _ := os.ReadDir(filepath.Join(state, "sandbash", "runs")); len(runs) != 0 {
			t.Errorf("the one-shot session left its directory: %v", runs)
		}

		// Nothing is staged, so nothing is idmapped: a root-owned
		// workspace's calls would run as root.
		if err := os.Chown(ws, 0, 0); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = agent(withState, "--", "id -u")
		if code != 125 || out != "" || !strings.Contains(errOut, "belongs to root") {
			t.Errorf("a root-owned workspace: exit %d, output %q, stderr %q; want exit 125 and a refusal", code, out, errOut)
		}
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}

		// Paths no mount from the host holds: an extra path, and the
		// session's own directory (under HOME in the container).
		for _, c := range []struct {
			env  []string
			args []string
			path string
		}{
			{withState, []string{"--readable", "/etc"}, "/etc"},
			{nil, nil, "/root/.local/state/sandbash/runs/"},
		} {
			out, errOut, code := agent(c.env, append(c.args, "--", "echo ran")...)
			if code != 125 || strings.Contains(out, "ran") || !strings.Contains(errOut, "not on a mount from the engine's host") || !strings.Contains(errOut, c.path) {
				t.Errorf("%v: exit %d, output %q, stderr %q; want exit 125 and a refusal naming %s", c.args, code, out, errOut, c.path)
			}
		}
	})
}
