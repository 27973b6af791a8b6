package bwrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/workspace"
)

// TestBornInCallCgroups: the call's program starts inside each of the
// call's cgroups: a v1 one by the launcher thread stepping in for the
// fork, the v2 one by clone3; and where it cannot be born there (a v1
// mount that does not show the thread's own cgroup), through the launcher,
// which waits until it was moved in. Run as root, on the v1 hierarchies
// sandbash finds here plus the v2 one (whose controllers a hybrid host
// keeps in v1: it takes processes all the same).
func TestBornInCallCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to create cgroups")
	}
	b, err := New()
	if err != nil {
		t.Skipf("bwrap: %v", err)
	}
	if b.enf.cg == nil {
		t.Skipf("no cgroups here: %s", b.enf.nocgs)
	}
	var v1 []hierarchy
	for _, h := range b.enf.cg.hs {
		if !h.v2 {
			v1 = append(v1, h)
		}
	}
	var v2 *hierarchy
	if m, ok := cgroupMounts()[""]; ok {
		base := filepath.Join(m.point, "sandbash-test-"+hex.EncodeToString(randBytes(4)))
		if err := os.Mkdir(base, 0o755); err == nil {
			t.Cleanup(func() { os.Remove(base) })
			v2 = &hierarchy{v2: true, base: base}
		}
	}
	if len(v1) == 0 && v2 == nil {
		t.Skip("no cgroup hierarchy to test with")
	}
	noHome := append([]hierarchy(nil), v1...)
	for i := range noHome {
		noHome[i].mount = ""
	}
	cases := map[string][]hierarchy{"v1": v1, "v1 without the thread's own cgroup": noHome}
	if v2 != nil {
		cases["v2"] = []hierarchy{*v2}
		cases["v1 and v2"] = append(append([]hierarchy(nil), v1...), *v2)
	}
	for name, hs := range cases {
		if len(hs) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b.enf.cg = &cgroups{hs: hs}
			s, err := b.Open(context.Background(), testSpec(t))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			p, err := s.Start(context.Background(), &backend.Call{Command: "sleep 60"})
			if err != nil {
				t.Fatal(err)
			}
			proc := p.(*process)
			pid := proc.cmd.Process.Pid
			in, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
			for i, dir := range proc.limits.cg.dirs {
				h := hs[i]
				rel := strings.TrimPrefix(dir, filepath.Dir(h.base))
				if !strings.Contains(string(in), ":"+rel+"\n") {
					t.Errorf("the call's bwrap (pid %d) is not in %s: %s", pid, dir, in)
				}
			}
			_ = p.Signal(syscall.SIGKILL)
			_, _ = p.Wait()
		})
	}
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// testSpec is a session of root's, with a workspace, /tmp and HOME of
// its own.
func testSpec(t *testing.T) *backend.SessionSpec {
	base := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ws := mk("ws")
	sp := &backend.SessionSpec{
		ID: "t" + hex.EncodeToString(randBytes(6)), Workspace: ws,
		Mounts: []backend.Mount{{Source: ws, Target: ws}},
		TmpDir: mk("tmp"), HomeDir: mk("home"), Network: backend.NetworkNone,
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + backend.Home},
	}
	if err := workspace.Seal(sp); err != nil {
		t.Fatal(err)
	}
	return sp
}
