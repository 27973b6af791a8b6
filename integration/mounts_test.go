package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLISessionKeepsWhatItChecked: a CLI session is reopened by every
// run; a host path it mounts that leads elsewhere than at `session open`
// (here a readable directory swapped for a symlink) refuses the run
// instead of mounting what it leads to now.
func TestCLISessionKeepsWhatItChecked(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		ro := filepath.Join(c.dir, "../ro")
		other := filepath.Join(c.dir, "../other")
		for _, d := range []string{ro, other} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(other, "canary"), []byte("elsewhere\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := c.run(append(append([]string{"session", "open"}, e.args()...), "--readable", ro)...)
		id := strings.TrimSpace(out)
		if code != 0 {
			t.Fatalf("session open: exit %d %s", code, errOut)
		}
		defer c.run("session", "close", id)
		if _, errOut, code := c.run("run", "--session", id, "--", "ls "+ro); code != 0 {
			t.Fatalf("first run: exit %d %s", code, errOut)
		}
		if err := os.Rename(ro, ro+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(other, ro); err != nil {
			t.Fatal(err)
		}
		out, errOut, code = c.run("run", "--session", id, "--", "cat "+ro+"/canary")
		if code != 125 || strings.Contains(out, "elsewhere") || !strings.Contains(errOut, "since the session opened") {
			t.Errorf("run after the swap: exit %d, %q %s; want 125 and a refusal", code, out, errOut)
		}
	})
}
