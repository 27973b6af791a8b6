package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestCLIReviewSession: a session in overlay mode leaves the workspace
// alone; diff, apply (with a conflicting edit on the host), checkpoint,
// restore and reset work from separate sandbash processes. The workspace
// here belongs to root, so the calls run as 65533 through idmapped layers,
// and what apply writes belongs to root.
func TestCLIReviewSession(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		for name, body := range map[string]string{"a.txt": "one\n", "b.txt": "bee\n", "c.txt": "sea\n"} {
			if err := os.WriteFile(filepath.Join(c.dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		must := func(args ...string) string {
			t.Helper()
			out, errOut, code := c.run(args...)
			if code != 0 {
				t.Fatalf("sandbash %v: exit %d\n%s%s", args, code, out, errOut)
			}
			return out
		}
		// A direct-mode session has nothing to review.
		direct := strings.TrimSpace(must(append([]string{"session", "open"}, e.args()...)...))
		if _, errOut, code := c.run("session", "diff", direct); code != 125 || !strings.Contains(errOut, "direct mode") {
			t.Errorf("diff of a direct-mode session: exit %d %s", code, errOut)
		}
		must("session", "close", direct)
		overlay := append([]string{"session", "open", "--workspace-mode", "overlay"}, e.args()...)
		if e.name == kubernetes.name {
			// By design: the overlay is a mount that unprivileged pods
			// cannot make.
			out, errOut, code := c.run(overlay...)
			if code != 125 || out != "" || !strings.Contains(errOut, "reviewable overlay workspaces are not supported on Kubernetes") || !strings.Contains(errOut, "workspace mounted directly") {
				t.Errorf("session open --workspace-mode overlay: exit %d, stdout %q, stderr %q; want 125, no session and why", code, out, errOut)
			}
			return
		}
		id := strings.TrimSpace(must(overlay...))
		defer c.run("session", "close", id)
		must("run", "--session", id, "--", "echo two >> a.txt && rm b.txt && echo new > n.txt && echo mine > c.txt")
		if out := must("run", "--session", id, "--", "cat a.txt n.txt; test -e b.txt || echo no-b"); out != "one\ntwo\nnew\nno-b\n" {
			t.Errorf("the session's view: %q", out)
		}
		if b, _ := os.ReadFile(filepath.Join(c.dir, "a.txt")); string(b) != "one\n" {
			t.Fatalf("the workspace changed before apply: a.txt %q", b)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "n.txt")); err == nil {
			t.Fatal("n.txt reached the workspace before apply")
		}
		diff := must("session", "diff", id)
		for _, s := range []string{"diff --git a/a.txt b/a.txt", "+two", "deleted file mode", "new file mode 100644"} {
			if !strings.Contains(diff, s) {
				t.Errorf("session diff lacks %q:\n%s", s, diff)
			}
		}
		if git, err := exec.LookPath("git"); err == nil {
			cmd := exec.Command(git, "apply", "--check", "-")
			cmd.Dir = c.dir
			cmd.Stdin = strings.NewReader(diff)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("git apply --check: %v\n%s", err, out)
			}
		}
		if stat := must("session", "diff", id, "--stat"); !strings.Contains(stat, "A n.txt") || !strings.Contains(stat, "4 change(s)") {
			t.Errorf("session diff --stat:\n%s", stat)
		}
		must("session", "checkpoint", id, "before-more")
		must("run", "--session", id, "--", "echo later > n.txt")
		must("session", "restore", id, "before-more")
		if out := must("run", "--session", id, "--", "cat n.txt"); out != "new\n" {
			t.Errorf("after restore n.txt is %q", out)
		}
		// What lands is what was reviewed: a change made after the diff
		// (the agent ran another command) fails apply --expect.
		digest := func() string {
			t.Helper()
			_, errOut, code := c.run("session", "diff", id)
			i := strings.Index(errOut, "--expect ")
			if code != 0 || i < 0 {
				t.Fatalf("session diff: exit %d, no digest on stderr: %q", code, errOut)
			}
			return strings.Fields(errOut[i+len("--expect "):])[0]
		}
		reviewed := digest()
		must("run", "--session", id, "--", "echo sneaky > s.txt")
		if out, errOut, code := c.run("session", "apply", id, "--expect", reviewed); code != 125 || !strings.Contains(errOut, "no longer those you reviewed") {
			t.Errorf("apply --expect after a later change: exit %d\n%s%s", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "s.txt")); err == nil {
			t.Fatal("apply --expect applied changes nobody reviewed")
		}
		must("session", "reset", id, "s.txt")
		if again := digest(); again != reviewed {
			t.Errorf("the same changes have another digest: %s, then %s", reviewed, again)
		}
		// Someone edits c.txt on the host meanwhile: apply refuses it,
		// applies the rest, and says so.
		if err := os.WriteFile(filepath.Join(c.dir, "c.txt"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := c.run("session", "apply", id, "--expect", digest())
		if code != 1 || !strings.Contains(errOut, "not applied: c.txt") || !strings.Contains(errOut, "changed on the host") {
			t.Errorf("session apply: exit %d\n%s%s", code, out, errOut)
		}
		for name, want := range map[string]string{"a.txt": "one\ntwo\n", "n.txt": "new\n", "c.txt": "host\n"} {
			if b, err := os.ReadFile(filepath.Join(c.dir, name)); err != nil || string(b) != want {
				t.Errorf("%s after apply: %q %v, want %q", name, b, err, want)
			}
		}
		// A new file belongs to the workspace's owner: root in the root
		// leg, the test user in make test-user's.
		if fi, err := os.Stat(filepath.Join(c.dir, "n.txt")); err == nil {
			wfi, err := os.Stat(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			ws := wfi.Sys().(*syscall.Stat_t)
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != ws.Uid || st.Gid != ws.Gid {
				t.Errorf("n.txt belongs to %d:%d, want the workspace's owner, %d:%d", st.Uid, st.Gid, ws.Uid, ws.Gid)
			}
		}
		if _, err := os.Stat(filepath.Join(c.dir, "b.txt")); err == nil {
			t.Error("b.txt is still in the workspace after apply")
		}
		if stat := must("session", "diff", id, "--stat"); !strings.Contains(stat, "M c.txt") || !strings.Contains(stat, "1 change(s)") {
			t.Errorf("after apply:\n%s", stat)
		}
		must("session", "reset", id, "c.txt")
		if out := must("run", "--session", id, "--", "cat c.txt"); out != "host\n" {
			t.Errorf("after reset c.txt is %q in the session", out)
		}
	})
}

// TestMCPWorkspaceTool: `sandbash mcp --session ID` of an overlay session
// serves the workspace tool: the agent checkpoints, restores and diffs,
// and cannot apply; the user applies with the CLI.
func TestMCPWorkspaceTool(t *testing.T) {
	c := newCLI(t)
	if err := os.WriteFile(filepath.Join(c.dir, "f.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := c.run("mcp", "--backend", "bwrap", "--workspace-mode", "overlay"); code != 125 || !strings.Contains(errOut, "needs --session") {
		t.Errorf("mcp in overlay mode without --session: exit %d %s", code, errOut)
	}
	out, errOut, code := c.run("session", "open", "--backend", "bwrap", "--workspace-mode", "overlay")
	if code != 0 {
		t.Fatalf("session open: %d %s", code, errOut)
	}
	id := strings.TrimSpace(out)
	defer c.run("session", "close", id)
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: c.cmd("mcp", "--session", id)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 2 || tools.Tools[1].Name != "workspace" && tools.Tools[0].Name != "workspace" {
		t.Fatalf("tools/list: %+v %v", tools, err)
	}
	call := func(tool string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("tools/call %s %v: %v", tool, args, err)
		}
		return toolText(t, res), res.IsError
	}
	call("bash", map[string]any{"command": "echo one > f.txt"})
	if text, isErr := call("workspace", map[string]any{"action": "checkpoint", "name": "one"}); isErr {
		t.Fatalf("checkpoint: %s", text)
	}
	call("bash", map[string]any{"command": "echo two > f.txt"})
	if text, _ := call("workspace", map[string]any{"action": "diff"}); !strings.Contains(text, "-host\n+two") {
		t.Errorf("diff:\n%s", text)
	}
	if text, isErr := call("workspace", map[string]any{"action": "restore", "name": "one"}); isErr {
		t.Fatalf("restore: %s", text)
	}
	if text, _ := call("bash", map[string]any{"command": "cat f.txt"}); !strings.Contains(text, "one\n") {
		t.Errorf("after restore: %s", text)
	}
	if text, isErr := call("workspace", map[string]any{"action": "apply"}); !isErr {
		t.Errorf("the agent could apply: %s", text)
	}
	if b, _ := os.ReadFile(filepath.Join(c.dir, "f.txt")); string(b) != "host\n" {
		t.Fatalf("the workspace changed without the user's apply: %q", b)
	}
	// The user applies, between the agent's calls.
	if out, errOut, code := c.run("session", "apply", id); code != 0 {
		t.Fatalf("session apply: %d %s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(c.dir, "f.txt")); string(b) != "one\n" {
		t.Errorf("after the user's apply f.txt is %q", b)
	}
}
