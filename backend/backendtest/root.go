package backendtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
)

// testNoHostRoot: with a workspace that belongs to root (a CI runner's
// checkout, when the suite runs as root), no process of a call holds host
// uid 0, root's private files stay closed to it, and what it creates in the
// workspace, /tmp and HOME still belongs to root on the host.
func testNoHostRoot(f *fixture) {
	if asUser() {
		f.rootWorkspaceAsUser()
		return
	}
	ws := filepath.Join(f.base, "rootws")
	if f.rootRefused(ws) {
		return
	}
	secret := filepath.Join(f.base, "rootonly")
	for _, d := range []string{ws, secret} {
		if err := os.Mkdir(d, 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("root's key\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: ws, Readable: []string{secret}})

	// Every process of a running call, seen from the host.
	mark := marker()
	stop := f.startLong(s, "bash -c 'echo started; sleep 60; :' "+mark)
	procs := processesWith(mark)
	if len(procs) == 0 {
		f.t.Error("no process of the call found on the host")
	}
	for _, p := range procs {
		pid, cmdline, _ := strings.Cut(p, ":")
		uids, gids := statusField(pid, "Uid:"), statusField(pid, "Gid:")
		if slices.Contains(uids, "0") || slices.Contains(gids, "0") {
			f.t.Errorf("a process of the call holds host root: pid %s (%.80s...): uids %v, gids %v", pid, strings.TrimSpace(cmdline), uids, gids)
		}
	}
	stop()

	r := f.run(s, "id -u; cat "+secret+"/key 2>/dev/null || echo refused")
	if lines := strings.Split(r.Output, "\n"); len(lines) < 2 || lines[0] == "0" || lines[1] != "refused" {
		f.t.Errorf("id -u and reading root's 0600 file: %q; want a uid other than 0 and refused", r.Output)
	}

	f.expect(s, "echo made > made && mkdir dir && echo t > /tmp/t && echo h > ~/h", 0, "")
	for _, p := range []string{filepath.Join(ws, "made"), filepath.Join(ws, "dir")} {
		fi, err := os.Stat(p)
		if err != nil {
			f.t.Errorf("%s: %v", p, err)
			continue
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 {
			f.t.Errorf("%s is owned by %d:%d on the host; want the workspace owner 0:0", p, st.Uid, st.Gid)
		}
	}
	f.expect(s, "cat /tmp/t ~/h made", 0, "t\nh\nmade\n")
}

// statusField returns the values of a /proc/PID/status line ("Uid:").
func statusField(pid, name string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			return strings.Fields(v)
		}
	}
	return nil
}
