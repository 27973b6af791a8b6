package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// runBounded runs sandbash like c.run, for calls that hang or eat memory
// when a guard is missing: it is killed after limit (hung is then true)
// and its address space is capped at 2 GiB, so a regression fails the test
// instead of stalling or exhausting the machine.
func (c *cli) runBounded(limit time.Duration, args ...string) (stdout, stderr string, code int, hung bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "prlimit", append([]string{"--as=2147483648", "--", binary}, args...)...)
	cmd.Dir, cmd.Env = c.dir, c.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("running sandbash under prlimit: %v", err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode(), ctx.Err() != nil
}

// writeDevcontainer writes .devcontainer/devcontainer.json naming image.
func writeDevcontainer(t *testing.T, ws, image string) {
	t.Helper()
	dir := filepath.Join(ws, ".devcontainer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "devcontainer.json"), []byte(`{"image": "`+image+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
}

// goImage is the test image with Go: a second, distinguishable image.
func (e engine) goImage() string {
	return strings.Replace(e.image, "sandbash-test", "sandbash-test-go", 1)
}

// whichImage tells the two test images apart from inside.
const whichImage = "if command -v go >/dev/null; then echo go-image; else echo plain-image; fi"

// TestDevcontainerUnsafeFiles: a devcontainer.json that is not a plain
// regular file of at most 1 MiB, reached without symlinks, is refused at
// once with exit 125: it never hangs (FIFO), never reads without end
// (/dev/zero), never follows a link out of the workspace.
func TestDevcontainerUnsafeFiles(t *testing.T) {
	c := newCLI(t)
	outside := filepath.Join(c.dir, "../outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "devcontainer.json"), []byte(`{"image": "sandbash-test:latest"}`), 0o644)
	dc := filepath.Join(c.dir, ".devcontainer")
	file := filepath.Join(dc, "devcontainer.json")
	cases := []struct {
		name  string
		make  func() error
		wants []string
	}{
		{"fifo", func() error { return syscall.Mkfifo(file, 0o644) }, []string{"is a named pipe", file}},
		{"symlink to /dev/zero", func() error { return os.Symlink("/dev/zero", file) }, []string{"is a symbolic link", file}},
		{"2 MiB file", func() error {
			return os.WriteFile(file, []byte(`{"image": "sandbash-test:latest", "pad": "`+strings.Repeat("x", 2<<20)+`"}`), 0o644)
		}, []string{"1 MiB", file}},
		{"symlinked directory", func() error { return os.Symlink(outside, dc) }, []string{"is a symbolic link", dc}},
		{"fifo at .devcontainer.json", func() error { return syscall.Mkfifo(filepath.Join(c.dir, ".devcontainer.json"), 0o644) }, []string{"is a named pipe", ".devcontainer.json"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(dc)
			os.Remove(filepath.Join(c.dir, ".devcontainer.json"))
			os.Remove(filepath.Join(c.dir, "ran"))
			if !strings.Contains(tc.name, "directory") {
				os.Mkdir(dc, 0o755)
			}
			if err := tc.make(); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"run", "--", "touch ran"},
				{"run", "--backend", "docker", "--", "touch ran"},
				{"session", "open"},
			} {
				out, errOut, code, hung := c.runBounded(30*time.Second, args...)
				if hung {
					t.Errorf("%q hung: still running after 30 s", args)
					continue
				}
				if code != 125 {
					t.Errorf("%q: exit %d, want 125; stdout %q, stderr %q", args, code, out, errOut)
				}
				for _, w := range tc.wants {
					if !strings.Contains(errOut, w) {
						t.Errorf("%q: stderr %q lacks %q", args, errOut, w)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
				t.Error("a command ran")
			}
		})
	}
	os.RemoveAll(dc)
	os.Remove(filepath.Join(c.dir, ".devcontainer.json"))
}

// TestDevcontainerTrust: a one-shot run acts on devcontainer.json only as
// the user last approved it with `sandbash trust`; a call that rewrites it
// makes the next run refuse until the user approves again.
func TestDevcontainerTrust(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		writeDevcontainer(t, c.dir, e.image)
		run := func(cmd string) (string, string, int) {
			return c.run("run", "--backend", e.name, "--", cmd)
		}
		if out, errOut, code := run("touch ran"); code != 125 || !strings.Contains(errOut, "sandbash trust") {
			t.Errorf("never approved: exit %d, stdout %q, stderr %q; want 125 and how to approve", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
			t.Error("a run acted on a devcontainer.json nobody approved")
			os.Remove(filepath.Join(c.dir, "ran"))
		}
		if out, errOut, code := c.run("trust"); code != 0 || !strings.Contains(out, e.image) {
			t.Errorf("trust: exit %d, stdout %q, stderr %q; want 0 and the image", code, out, errOut)
		}
		if out, errOut, code := run(whichImage); code != 0 || out != "plain-image\n" {
			t.Errorf("approved: exit %d, %q, %s", code, out, errOut)
		}
		// A call rewrites devcontainer.json to name another image.
		if _, errOut, code := run(`printf '{"image": "%s"}' ` + e.goImage() + ` > .devcontainer/devcontainer.json`); code != 0 {
			t.Fatalf("rewriting devcontainer.json: exit %d %s", code, errOut)
		}
		out, errOut, code := run("touch ran; " + whichImage)
		if code != 125 || !strings.Contains(errOut, "changed") || !strings.Contains(errOut, "sandbash trust") || strings.Contains(out, "go-image") {
			t.Errorf("after a call rewrote it: exit %d, stdout %q, stderr %q; want 125, \"changed\" and how to approve", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
			t.Error("a run acted on a devcontainer.json that changed since it was approved")
			os.Remove(filepath.Join(c.dir, "ran"))
		}
		// An explicit --image is the user's own choice: it runs.
		if out, errOut, code := c.run("run", "--backend", e.name, "--image", e.image, "--", whichImage); code != 0 || out != "plain-image\n" {
			t.Errorf("--image with a changed devcontainer.json: exit %d, %q, %s", code, out, errOut)
		}
		// Approving the new content makes it count.
		if out, errOut, code := c.run("trust", "--workspace", c.dir); code != 0 || !strings.Contains(out, e.goImage()) {
			t.Errorf("trust again: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		if out, errOut, code := run(whichImage); code != 0 || out != "go-image\n" {
			t.Errorf("approved again: exit %d, %q, %s", code, out, errOut)
		}
		if out, errOut, code := c.run("trust", "--revoke"); code != 0 {
			t.Errorf("trust --revoke: exit %d, %q, %s", code, out, errOut)
		}
		if out, errOut, code := run("true"); code != 125 || !strings.Contains(errOut, "sandbash trust") {
			t.Errorf("after --revoke: exit %d, %q, %s", code, out, errOut)
		}
	})
}

// TestDevcontainerSessionKeepsImage: a CLI session reads devcontainer.json
// once, when it opens. A call that rewrites it (to another image, or to a
// FIFO) changes nothing for the session's later calls.
func TestDevcontainerSessionKeepsImage(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		writeDevcontainer(t, c.dir, e.image)
		if _, errOut, code := c.run("trust"); code != 0 {
			t.Errorf("trust: exit %d %s", code, errOut)
		}
		out, errOut, code := c.run("session", "open", "--backend", e.name)
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 12 {
			t.Fatalf("session open: exit %d, %q %s", code, out, errOut)
		}
		t.Cleanup(func() { c.run("session", "close", id) })
		if out, errOut, code := c.run("run", "--session", id, "--", whichImage); code != 0 || out != "plain-image\n" {
			t.Errorf("first call: exit %d, %q, %s", code, out, errOut)
		}
		// The image is on this machine and the new content is even
		// approved: still, the session keeps the image it opened with.
		if _, errOut, code := c.run("run", "--session", id, "--", `printf '{"image": "%s"}' `+e.goImage()+` > .devcontainer/devcontainer.json`); code != 0 {
			t.Fatalf("rewriting devcontainer.json: exit %d %s", code, errOut)
		}
		c.run("trust")
		if out, errOut, code := c.run("run", "--session", id, "--", whichImage); code != 0 || out != "plain-image\n" {
			t.Errorf("after a call named another image: exit %d, %q, %s; want the session's own image", code, out, errOut)
		}
		// A FIFO there: the session never opens it.
		if _, errOut, code := c.run("run", "--session", id, "--", "rm .devcontainer/devcontainer.json && mkfifo .devcontainer/devcontainer.json"); code != 0 {
			t.Fatalf("making a FIFO: exit %d %s", code, errOut)
		}
		if out, errOut, code, hung := c.runBounded(60*time.Second, "run", "--session", id, "--", whichImage); hung || code != 0 || out != "plain-image\n" {
			t.Errorf("after a call made a FIFO: hung %v, exit %d, %q, %s", hung, code, out, errOut)
		}
	})
}

// TestDevcontainerMCPKeepsImage: an MCP server resolves its image once, at
// start; a call that rewrites devcontainer.json does not move later calls.
func TestDevcontainerMCPKeepsImage(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		writeDevcontainer(t, c.dir, e.image)
		if _, errOut, code := c.run("trust"); code != 0 {
			t.Errorf("trust: exit %d %s", code, errOut)
		}
		cs := mcpClient(t, c.cmd("mcp", "--backend", e.name))
		if text := mcpRun(t, cs, whichImage); !strings.Contains(text, "plain-image") {
			t.Errorf("first call: %q", text)
		}
		mcpRun(t, cs, `printf '{"image": "%s"}' `+e.goImage()+` > .devcontainer/devcontainer.json`)
		c.run("trust")
		if text := mcpRun(t, cs, whichImage); !strings.Contains(text, "plain-image") {
			t.Errorf("after a call named another image: %q", text)
		}
	})
}

// TestDevcontainerImageNotPulled: an image that only devcontainer.json
// names is never pulled, even when the file is approved: the pull itself
// would reach a registry the workspace chose.
func TestDevcontainerImageNotPulled(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		const missing = "sandbash-no-such-image:leak"
		writeDevcontainer(t, c.dir, missing)
		if _, errOut, code := c.run("trust"); code != 0 {
			t.Errorf("trust: exit %d %s", code, errOut)
		}
		for _, args := range [][]string{
			{"run", "--backend", e.name, "--", "touch ran"},
			{"session", "open", "--backend", e.name},
		} {
			_, errOut, code := c.run(args...)
			if code != 125 || strings.Contains(errOut, "pulling") || !strings.Contains(errOut, "pull it yourself") || !strings.Contains(errOut, "--image") {
				t.Errorf("%q: exit %d, stderr %q; want 125, no pull, and how to get the image", args, code, errOut)
			}
		}
		if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
			t.Error("a command ran")
		}
	})
}

// TestGoEnvOutsideWorkspace: --cache go asks the host's go where its
// caches are. A workspace whose go.mod and go.work demand a toolchain the
// host lacks must not make the host fetch one: go runs outside the
// workspace with GOTOOLCHAIN=local. The user's own GOMODCACHE still counts.
func TestGoEnvOutsideWorkspace(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	c := newCLI(t)
	var mu sync.Mutex
	var asked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer proxy.Close()
	os.WriteFile(filepath.Join(c.dir, "go.mod"), []byte("module example.com/evil\n\ngo 1.99\n\ntoolchain go1.99.0\n"), 0o644)
	os.WriteFile(filepath.Join(c.dir, "go.work"), []byte("go 1.99\n\ntoolchain go1.99.0\n\nuse .\n"), 0o644)
	mod := filepath.Join(c.dir, "../gomod")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(mod, "marker"), []byte("host-modcache\n"), 0o644)
	c.env = append(c.env, "GOTOOLCHAIN=auto", "GOPROXY="+proxy.URL, "GOSUMDB=off", "GOMODCACHE="+mod, "GOFLAGS=-mod=mod")
	out, errOut, code := c.run("run", "--backend", "bwrap", "--cache", "go", "--", "cat ~/go/pkg/mod/marker")
	if code != 0 || out != "host-modcache\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want the host's GOMODCACHE in the sandbox", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) > 0 {
		t.Errorf("the host's go asked the module proxy for %v: it ran with the workspace's go.mod", asked)
	}
	if m, _ := filepath.Glob(filepath.Join(mod, "golang.org", "toolchain*")); len(m) > 0 {
		t.Errorf("a toolchain was downloaded on the host: %v", m)
	}
}

// mcpClient connects to the MCP server cmd starts; it is closed when the
// test ends.
func mcpClient(t *testing.T, cmd *exec.Cmd) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// mcpRun calls the bash tool and returns its text.
func mcpRun(t *testing.T, cs *mcp.ClientSession, command string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil {
		t.Fatalf("tools/call %q: %v", command, err)
	}
	return toolText(t, res)
}
