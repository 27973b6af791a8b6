package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash/backend/backendtest"
)

func toolText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPOverStdio drives `sandbash mcp` as an agent does: the official Go
// SDK client over the process's stdio.
func TestMCPOverStdio(t *testing.T) {
	forBackend(t, true, func(t *testing.T, e engine, c *cli) {
		cmd := c.cmd(append([]string{"mcp", "--cache-dir", c.dir + "/../hostcache:/home/sandbash/hc"}, e.args()...)...)
		os.MkdirAll(filepath.Join(c.dir, "../hostcache"), 0o755)
		ctx := context.Background()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) != 1 || !strings.Contains(tools.Tools[0].Description, "backend "+e.name) {
			t.Fatalf("tools/list: %+v %v", tools, err)
		}
		run := func(command string) (string, bool) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
			if err != nil {
				t.Fatalf("tools/call %q: %v", command, err)
			}
			return toolText(t, res), res.IsError
		}
		if text, isErr := run("pwd; echo kept > /tmp/k; echo cached > ~/hc/f"); isErr || !strings.Contains(text, c.dir) {
			t.Errorf("first call: isError=%v %q", isErr, text)
		}
		if text, _ := run("cat /tmp/k ~/hc/f"); !strings.Contains(text, "kept\ncached\n") {
			t.Errorf("the session did not keep /tmp and the cache layer: %q", text)
		}
		if text, isErr := run("exit 4"); isErr || !strings.Contains(text, "exit status: 4") {
			t.Errorf("exit 4: isError=%v %q", isErr, text)
		}
		pid := cmd.Process.Pid
		if err := cs.Close(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Logf("close: %v", err)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "../hostcache/f")); err == nil {
			t.Error("a write to the cache reached the host")
		}
		if e.image != "" {
			if left := objects(t, e.name, pid); len(left) > 0 {
				t.Errorf("the server left %v behind", left)
			}
		}
	})
}

// TestMCPInspector lists and calls the tool with the official MCP inspector
// CLI (installed by make deps).
func TestMCPInspector(t *testing.T) {
	bin := os.Getenv("SANDBASH_INSPECTOR")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache/sandbash/inspector/node_modules/.bin/mcp-inspector")
	}
	if _, err := os.Stat(bin); err != nil {
		backendtest.Unavailable(t, "inspector", err)
	}
	forBackend(t, true, func(t *testing.T, e engine, c *cli) {
		base := append([]string{"--cli", binary, "mcp"}, e.args()...)
		inspect := func(args ...string) map[string]any {
			cmd := exec.Command(bin, append(base, args...)...)
			cmd.Dir, cmd.Env = c.dir, c.env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("inspector %v: %v\n%s", args, err, out)
			}
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("inspector %v printed no JSON: %v\n%s", args, err, out)
			}
			return v
		}
		list := inspect("--method", "tools/list")
		if tools, _ := list["tools"].([]any); len(tools) != 1 || tools[0].(map[string]any)["name"] != "bash" {
			t.Errorf("tools/list: %v", list)
		}
		res := inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=echo from the inspector; exit 2")
		b, _ := json.Marshal(res)
		if !strings.Contains(string(b), `from the inspector\nexit status: 2`) {
			t.Errorf("tools/call: %s", b)
		}
	})
}

// TestCLISessions: /tmp, HOME and caches persist between separate `run
// --session` processes, concurrent runs in one session both complete, and
// close removes it.
func TestCLISessions(t *testing.T) {
	forBackend(t, true, func(t *testing.T, e engine, c *cli) {
		host := filepath.Join(c.dir, "../hostcache")
		os.MkdirAll(host, 0o755)
		out, errOut, code := c.run(append(append([]string{"session", "open"}, e.args()...), "--cache-dir", host+":/home/sandbash/hc", "--env", "SB_X=1")...)
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 12 {
			t.Fatalf("session open: exit %d, %q %s", code, out, errOut)
		}
		if _, errOut, code := c.run("run", "--session", id, "--", "echo t > /tmp/t; echo h > ~/h; echo c > ~/hc/c"); code != 0 {
			t.Fatalf("first run: exit %d %s", code, errOut)
		}
		if out, errOut, code := c.run("run", "--session", id, "--", "cat /tmp/t ~/h ~/hc/c; echo $SB_X"); code != 0 || out != "t\nh\nc\n1\n" {
			t.Errorf("second run: exit %d %q %s", code, out, errOut)
		}
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, codes[i] = c.run("run", "--session", id, "--", "echo $$ >> /tmp/both; sleep 0.5")
			}()
		}
		wg.Wait()
		if out, _, _ := c.run("run", "--session", id, "--", "wc -l < /tmp/both"); codes[0] != 0 || codes[1] != 0 || strings.TrimSpace(out) != "2" {
			t.Errorf("concurrent runs: exit %v, %q lines", codes, out)
		}
		if _, errOut, code := c.run("run", "--session", id, "--network", "on", "--", "true"); code != 125 || !strings.Contains(errOut, "keeps the flags") {
			t.Errorf("a flag with --session: exit %d %s", code, errOut)
		}
		if out, _, _ := c.run("session", "list"); !strings.Contains(out, id) {
			t.Errorf("session list lacks %s:\n%s", id, out)
		}
		if _, errOut, code := c.run("session", "close", id); code != 0 {
			t.Fatalf("session close: %d %s", code, errOut)
		}
		if _, errOut, code := c.run("run", "--session", id, "--", "true"); code != 125 || !strings.Contains(errOut, "no session") {
			t.Errorf("run in a closed session: exit %d %s", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(host, "c")); err == nil {
			t.Error("a write to the cache reached the host")
		}
	})
}
