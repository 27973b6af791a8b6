package backendtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
)

// What an image (Capabilities.EnvImage) and an engine must not add to a call.

// envOf runs env in s and returns what the call saw.
func envOf(f *fixture, s *sandbash.Session) map[string]string {
	f.t.Helper()
	r := f.run(s, "env")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	return got
}

// testImageEnv: the image's ENV does not reach the command, nor do the
// variables the engine adds (HOSTNAME, container=podman, HOME from the
// image's passwd entry): only the session's environment and what bash sets
// by itself.
func testImageEnv(f *fixture) {
	s := f.open(sandbash.Config{Image: f.caps.EnvImage, Env: []string{"SANDBASH_SUITE_SET=given value"}})
	got := envOf(f, s)
	// PATH is the image's own: its tools are where it says.
	want := map[string]string{"HOME": backend.Home, "TERM": "dumb", "LANG": "C.UTF-8", "SANDBASH_SUITE_SET": "given value",
		"PATH": "/opt/imagetools:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for k, v := range want {
		if got[k] != v {
			f.t.Errorf("%s=%q in the call, want %q", k, got[k], v)
		}
	}
	bash := map[string]bool{"PWD": true, "SHLVL": true, "_": true, "OLDPWD": true}
	for k, v := range got {
		if _, ok := want[k]; !ok && !bash[k] {
			f.t.Errorf("%s=%s in the call: the image or the engine added it", k, v)
		}
	}
	// Nor is the image's ENV in the container's own environment, the one
	// its supervisor started with (the init, PID 1, has it too; where the
	// supervisor is PID 1, it is not dumpable, and the call cannot read it).
	r := f.run(s, "{ tr '\\0' '\\n' < /proc/1/environ; } 2>/dev/null | grep -E '^(SANDBASH_IMAGE_CANARY|BASH_ENV|ENV)=' || echo none")
	if r.Output != "none\n" {
		f.t.Errorf("the image's ENV is in the container's own environment:\n%s", r.Output)
	}
}

// testImageGroups: an image whose /etc/group lists the workspace owner's
// name in other groups does not give the call those groups: its only group
// is the workspace owner's.
func testImageGroups(f *fixture) {
	// The env image names uid 4242 (the owner when the suite runs as
	// root) in an extra group; as a user, the owner has no name there and
	// the check is only that the call gets no group but its own.
	s := f.open(sandbash.Config{Image: f.caps.EnvImage})
	r := f.run(s, "grep -E '^(Uid|Gid|Groups):' /proc/self/status")
	var groups []string
	for _, line := range strings.Split(r.Output, "\n") {
		if g, ok := strings.CutPrefix(line, "Groups:"); ok {
			groups = strings.Fields(g)
		}
	}
	if !strings.Contains(r.Output, "Groups:") {
		f.t.Fatalf("no Groups line in the call's /proc/self/status: %q", r.Output)
	}
	for _, g := range groups {
		if g != strconv.Itoa(f.gid) {
			f.t.Errorf("the call has supplementary group %s (from the image's /etc/group); want only %d:\n%s", g, f.gid, r.Output)
		}
	}
}

// testSupervisorEnv: the image's BASH_ENV (and ENV) name a file in the
// session's /tmp, which every call can write. A call plants it; no later
// supervisor or command may run it (a supervisor that did would hand the
// planted code the next call's secret nonce).
func testSupervisorEnv(f *fixture) {
	s := f.open(sandbash.Config{Image: f.caps.EnvImage})
	plant := `cat > /tmp/sandbash-poison <<'EOF'
echo "sourced by pid $$ ($0) running: ${BASH_EXECUTION_STRING:0:80}" >> /tmp/sandbash-poisoned
EOF
echo planted`
	f.expect(s, plant, 0, "planted\n")
	// The pool may have started the next call's container while the
	// first ran; the one after it starts only now, with the file planted.
	f.expect(s, "echo clean", 0, "clean\n")
	f.expect(s, "echo clean", 0, "clean\n")
	if b, err := os.ReadFile(filepath.Join(s.Dir(), "tmp", "sandbash-poisoned")); err == nil {
		f.t.Errorf("the file the image's BASH_ENV names, planted by a call, was run:\n%s", b)
	}
}

// testNoStoredOutput: while a call that printed a secret still runs (so
// its container exists), the engine holds no copy of the output.
func testNoStoredOutput(f *fixture) {
	ws := f.dir("ws")
	s := f.open(sandbash.Config{Workspace: ws})
	secret := marker()
	live := &liveWriter{want: secret + "-err", seen: make(chan struct{})}
	ran := make(chan error, 1)
	go func() {
		cmd := "echo " + secret + "-out; echo " + secret + "-err >&2; while [ ! -e release ]; do sleep 0.1; done"
		_, err := s.Run(f.ctx, sandbash.Request{Command: cmd, Live: live})
		ran <- err
	}()
	select {
	case <-live.seen:
	case err := <-ran:
		f.t.Fatalf("the call ended before it printed its secret: %v", err)
	}
	stored := f.caps.StoredOutput(f.t, s.ID())
	if err := os.WriteFile(filepath.Join(ws, "release"), nil, 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := <-ran; err != nil {
		f.t.Errorf("the call: %v", err)
	}
	if i := strings.Index(stored, secret); i >= 0 {
		f.t.Errorf("the engine keeps a copy of a call's output: %q", stored[max(0, i-80):min(len(stored), i+80)])
	}
}

// Journal returns what the systemd journal holds for a container (engines
// tag their entries with CONTAINER_ID_FULL), or "" where there is no
// journal.
func Journal(containerID string) string {
	if _, err := os.Stat("/run/systemd/journal/socket"); err != nil {
		return ""
	}
	out, _ := exec.Command("journalctl", "--no-pager", "-o", "cat", "CONTAINER_ID_FULL="+containerID).CombinedOutput()
	return string(out)
}
