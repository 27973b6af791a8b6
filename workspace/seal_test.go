package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandbash/sandbash/backend"
)

// newSpec returns a spec for a workspace at ws with extra mounts, whose
// session directory is a fresh temporary one.
func newSpec(t *testing.T, ws string, extra ...backend.Mount) *backend.SessionSpec {
	t.Helper()
	sess := t.TempDir()
	for _, d := range []string{"tmp", "home"} {
		if err := os.Mkdir(filepath.Join(sess, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return &backend.SessionSpec{
		Workspace: ws,
		Mounts:    append([]backend.Mount{{Source: ws, Target: ws}}, extra...),
		TmpDir:    filepath.Join(sess, "tmp"), HomeDir: filepath.Join(sess, "home"),
		UID: os.Getuid(), GID: os.Getgid(),
	}
}

func realTemp(t *testing.T) string {
	t.Helper()
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func targets(ms []backend.Mount) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Target)
	}
	return out
}

func findMount(ms []backend.Mount, target string) (backend.Mount, bool) {
	for _, m := range ms {
		if m.Target == target {
			return m, true
		}
	}
	return backend.Mount{}, false
}

// checkOrder fails if a mount comes before one whose target is above it.
func checkOrder(t *testing.T, ms []backend.Mount) {
	t.Helper()
	for i, m := range ms {
		for _, o := range ms[i+1:] {
			if o.Target != m.Target && within(m.Target, o.Target) {
				t.Errorf("%s is mounted before %s, which is above it", m.Target, o.Target)
			}
		}
	}
}

func TestSealPinsNestedSources(t *testing.T) {
	base := realTemp(t)
	ws, outer := filepath.Join(base, "outer/mid/ws"), filepath.Join(base, "outer")
	mkdirs(t, filepath.Join(ws, "a/b"), filepath.Join(ws, "vendor"))
	spec := newSpec(t, ws,
		backend.Mount{Source: filepath.Join(ws, "a/b"), Target: filepath.Join(ws, "a/b"), ReadOnly: true},
		backend.Mount{Source: filepath.Join(ws, "vendor"), Target: filepath.Join(ws, "vendor"), ReadOnly: true},
		backend.Mount{Source: outer, Target: outer},
	)
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	// Every directory between a writable mount and a source inside it
	// becomes a mount point: ws/a (under the workspace), outer/mid (under
	// --writable outer, above the workspace).
	for _, p := range []string{filepath.Join(ws, "a"), filepath.Join(outer, "mid")} {
		if m, ok := findMount(spec.Mounts, p); !ok || m.Source != p || m.ReadOnly {
			t.Errorf("no read-write self-bind pinning %s: %v", p, targets(spec.Mounts))
		}
	}
	if len(spec.Mounts) != 6 {
		t.Errorf("mounts: %v, want the 4 given and 2 pins", targets(spec.Mounts))
	}
	checkOrder(t, spec.Mounts)
	for _, p := range hostPaths(spec) {
		if id, ok := spec.Identities[p]; !ok || id.Type == 0 {
			t.Errorf("no identity recorded for %s", p)
		}
	}
	if err := Verify(spec); err != nil {
		t.Errorf("Verify right after Seal: %v", err)
	}
}

func TestSealRefusesSessionAndCacheDirsInsideWritable(t *testing.T) {
	ws := realTemp(t)
	mkdirs(t, filepath.Join(ws, "sess/tmp"), filepath.Join(ws, "sess/home"), filepath.Join(ws, "cache"))
	spec := newSpec(t, ws)
	spec.TmpDir, spec.HomeDir = filepath.Join(ws, "sess/tmp"), filepath.Join(ws, "sess/home")
	if err := Seal(spec); !errors.Is(err, ErrNested) {
		t.Errorf("session directory in the workspace: %v, want ErrNested", err)
	}
	spec = newSpec(t, ws)
	up := t.TempDir()
	spec.Overlays = []backend.Overlay{{Name: "go", Lower: filepath.Join(ws, "cache"), Upper: up, Work: up, Target: "/home/sandbash/go"}}
	if err := Seal(spec); !errors.Is(err, ErrNested) || !strings.Contains(err.Error(), "cache go") {
		t.Errorf("cache directory in the workspace: %v, want ErrNested naming the cache", err)
	}
}

// listenAt starts a unix listener at p, closed when the test ends.
func listenAt(t *testing.T, p string) {
	t.Helper()
	mkdirs(t, filepath.Dir(p))
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

func TestSealMasksListeningSockets(t *testing.T) {
	ws, ro := realTemp(t), realTemp(t)
	live, deep, inRO := filepath.Join(ws, "agent.sock"), filepath.Join(ws, "x/y/d.sock"), filepath.Join(ro, "r.sock")
	for _, p := range []string{live, deep, inRO} {
		listenAt(t, p)
	}
	// A socket in a part of the workspace another mount covers is not
	// in the sandbox: nothing to mask there.
	other := realTemp(t)
	listenAt(t, filepath.Join(ws, "covered/c.sock"))
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(ws, "stale.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	spec := newSpec(t, ws, backend.Mount{Source: ro, Target: ro, ReadOnly: true},
		backend.Mount{Source: other, Target: filepath.Join(ws, "covered"), ReadOnly: true})
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{live, deep, inRO} {
		if m, ok := findMount(spec.Mounts, p); !ok || m.Source != "/dev/null" || !m.ReadOnly {
			t.Errorf("%s is not masked: %v", p, targets(spec.Mounts))
		}
	}
	if _, ok := findMount(spec.Mounts, filepath.Join(ws, "stale.sock")); ok {
		t.Error("a stale socket (nobody listens) was masked; it should stay removable")
	}
	for _, p := range []string{filepath.Join(ws, "x"), filepath.Join(ws, "x/y")} {
		if _, ok := findMount(spec.Mounts, p); !ok {
			t.Errorf("%s, above a masked socket in the workspace, is not pinned", p)
		}
	}
	if len(spec.Mounts) != 8 {
		t.Errorf("mounts: %v, want workspace, 2 readable, 3 masks, 2 pins", targets(spec.Mounts))
	}
	checkOrder(t, spec.Mounts)

	// A cache holding a live socket is refused: the engine mounts it,
	// nothing can be masked in it.
	cache := realTemp(t)
	listenAt(t, filepath.Join(cache, "c.sock"))
	spec = newSpec(t, ws)
	up := t.TempDir()
	spec.Overlays = []backend.Overlay{{Name: "npm", Lower: cache, Upper: up, Work: up, Target: "/home/sandbash/.npm"}}
	if err := Seal(spec); !errors.Is(err, ErrSocket) {
		t.Errorf("cache with a live socket: %v, want ErrSocket", err)
	}
}

func TestListening(t *testing.T) {
	dir := realTemp(t)
	long := filepath.Join(dir, strings.Repeat("d", 120), "s.sock")
	for _, p := range []string{filepath.Join(dir, "s.sock"), long} {
		mkdirs(t, filepath.Dir(p))
		if len(p) < 108 {
			listenAt(t, p)
		} else {
			// Too long to bind by path: bind in its directory.
			wd, _ := os.Getwd()
			if err := os.Chdir(filepath.Dir(p)); err != nil {
				t.Fatal(err)
			}
			l, err := net.Listen("unix", filepath.Base(p))
			os.Chdir(wd)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
		}
		if !listening(p) {
			t.Errorf("listening(%s) = false for a live socket", p)
		}
	}
	if listening(filepath.Join(dir, "missing")) {
		t.Error("listening(missing) = true")
	}
}

// repo makes a minimal git directory at dir (what git init leaves, without
// running git): HEAD, objects/, refs/, config.
func repo(t *testing.T, dir string) {
	t.Helper()
	mkdirs(t, filepath.Join(dir, "objects"), filepath.Join(dir, "refs"))
	for name, body := range map[string]string{"HEAD": "ref: refs/heads/main\n", "config": "[core]\n\tbare = false\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSealProtectsGit(t *testing.T) {
	ws := realTemp(t)
	repo(t, filepath.Join(ws, ".git"))
	repo(t, filepath.Join(ws, ".git/modules/lib/foo"))
	spec := newSpec(t, ws)
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	g := filepath.Join(ws, ".git")
	for _, d := range []string{"hooks", "info"} {
		if fi, err := os.Stat(filepath.Join(g, d)); err != nil || !fi.IsDir() {
			t.Errorf(".git/%s was not created: %v", d, err)
		}
	}
	for _, p := range []string{g + "/hooks", g + "/info", g + "/config", g + "/modules/lib/foo/hooks", g + "/modules/lib/foo/config"} {
		if m, ok := findMount(spec.Mounts, p); !ok || !m.ReadOnly || m.Source != p {
			t.Errorf("%s is not mounted read-only over itself: %v", p, targets(spec.Mounts))
		}
	}
	for _, p := range []string{g, g + "/modules", g + "/modules/lib", g + "/modules/lib/foo"} {
		if m, ok := findMount(spec.Mounts, p); !ok || m.ReadOnly {
			t.Errorf("%s is not pinned read-write: %v", p, targets(spec.Mounts))
		}
	}
	checkOrder(t, spec.Mounts)
	if id, ok := spec.Identities[g+"/commondir"]; !ok || id != (backend.FileID{}) {
		t.Errorf(".git/commondir is not recorded as absent: %v %v", id, ok)
	}
	// git rewrites config by renaming a new file over it: not a change.
	if err := os.WriteFile(g+"/config.new", []byte("[core]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(g+"/config.new", g+"/config"); err != nil {
		t.Fatal(err)
	}
	if err := Verify(spec); err != nil {
		t.Errorf("after the host rewrote .git/config: %v", err)
	}
	if err := os.WriteFile(g+"/commondir", []byte("/elsewhere\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(spec); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "commondir") {
		t.Errorf("after .git/commondir appeared: %v, want ErrChanged naming it", err)
	}

	// A bare repository mounted writable: its own hooks and config.
	bare := realTemp(t)
	repo(t, bare)
	spec = newSpec(t, realTemp(t), backend.Mount{Source: bare, Target: bare})
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{bare + "/hooks", bare + "/config", bare + "/info"} {
		if m, ok := findMount(spec.Mounts, p); !ok || !m.ReadOnly {
			t.Errorf("bare repository: %s is not read-only: %v", p, targets(spec.Mounts))
		}
	}

	// .git as a symlink is refused; a read-only mount needs nothing.
	ws2 := realTemp(t)
	if err := os.Symlink(g, filepath.Join(ws2, ".git")); err != nil {
		t.Fatal(err)
	}
	if err := Seal(newSpec(t, ws2)); !errors.Is(err, ErrBadPath) {
		t.Errorf(".git symlink: %v, want ErrBadPath", err)
	}
	ws3 := realTemp(t)
	repo(t, filepath.Join(ws3, ".git"))
	spec = newSpec(t, ws3)
	spec.Mounts[0].ReadOnly = true
	if err := Seal(spec); err != nil || len(spec.Mounts) != 1 {
		t.Errorf("read-only repository: %v, mounts %v", err, targets(spec.Mounts))
	}
}

// linkedRepo makes a repository's git directory at main/.git with a linked
// worktree at wt, as git worktree add leaves them, and returns the
// worktree's directory in the repository.
func linkedRepo(t *testing.T, main, wt string) string {
	t.Helper()
	g := filepath.Join(main, ".git")
	repo(t, g)
	mkdirs(t, filepath.Join(g, "hooks"), filepath.Join(g, "info"))
	admin := filepath.Join(g, "worktrees", filepath.Base(wt))
	mkdirs(t, admin)
	for name, body := range map[string]string{"commondir": "../..\n", "gitdir": wt + "/.git\n", "HEAD": "ref: refs/heads/wt\n"} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(wt, ".git"), []byte("gitdir: "+admin+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return admin
}

func TestSealProtectsLinkedWorktree(t *testing.T) {
	main, wt := realTemp(t), realTemp(t)
	g := filepath.Join(main, ".git")
	admin := linkedRepo(t, main, wt)
	// Another linked worktree of the same repository, elsewhere.
	other := filepath.Join(g, "worktrees/other")
	mkdirs(t, other)
	for name, body := range map[string]string{"commondir": "../..\n", "gitdir": "/elsewhere/.git\n"} {
		if err := os.WriteFile(filepath.Join(other, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ro := []string{wt + "/.git", g + "/hooks", g + "/config", g + "/info", admin + "/commondir", admin + "/gitdir", other + "/commondir", other + "/gitdir"}
	// git's fsmonitor daemon listens in the worktree's directory.
	ipc := filepath.Join(admin, "fsmonitor--daemon.ipc")
	listenAt(t, ipc)
	// The worktree alone: the main repository's git directory is mounted
	// writable at its own path (not the main worktree's files), with the
	// same protection as if the user had mounted it, sockets masked.
	spec := newSpec(t, wt)
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	if m, ok := findMount(spec.Mounts, g); !ok || m.ReadOnly || m.Source != g {
		t.Errorf("worktree alone: %v, want %s mounted writable", targets(spec.Mounts), g)
	}
	if _, ok := findMount(spec.Mounts, main); ok {
		t.Errorf("the main worktree %s is mounted: %v", main, targets(spec.Mounts))
	}
	if m, ok := findMount(spec.Mounts, ipc); !ok || m.Source != "/dev/null" {
		t.Errorf("the fsmonitor socket %s is not masked: %v", ipc, targets(spec.Mounts))
	}
	if _, ok := spec.Identities[g]; !ok {
		t.Errorf("no identity recorded for %s", g)
	}
	if id, ok := spec.Identities[g+"/commondir"]; !ok || id != (backend.FileID{}) {
		t.Errorf("%s/commondir is not recorded as absent", g)
	}
	for _, p := range ro {
		if m, ok := findMount(spec.Mounts, p); !ok || !m.ReadOnly {
			t.Errorf("worktree alone: %s is not read-only: %v", p, targets(spec.Mounts))
		}
	}
	checkOrder(t, spec.Mounts)
	// The main repository mounted writable by the user: nothing added
	// over it, the same protection.
	spec = newSpec(t, wt, backend.Mount{Source: main, Target: main})
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	if m, ok := findMount(spec.Mounts, g); !ok || m.Source != g || !slices.Contains(spec.Mounts, backend.Mount{Source: g, Target: g}) {
		t.Errorf("main mounted writable: %v, want %s pinned", targets(spec.Mounts), g)
	}
	for _, p := range ro {
		if m, ok := findMount(spec.Mounts, p); !ok || !m.ReadOnly {
			t.Errorf("%s is not read-only: %v", p, targets(spec.Mounts))
		}
	}
	for _, p := range []string{g, g + "/worktrees", admin, other} {
		if _, ok := findMount(spec.Mounts, p); !ok {
			t.Errorf("%s is not pinned: %v", p, targets(spec.Mounts))
		}
	}
	checkOrder(t, spec.Mounts)
	// Mounted read-only by the user: left so.
	spec = newSpec(t, wt, backend.Mount{Source: main, Target: main, ReadOnly: true})
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Mounts {
		if within(m.Target, main) && !m.ReadOnly {
			t.Errorf("main mounted read-only: %s is writable: %v", m.Target, targets(spec.Mounts))
		}
	}
	// The main repository as the workspace: its worktrees' links are
	// read-only.
	spec = newSpec(t, main)
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range ro[1:] {
		if m, ok := findMount(spec.Mounts, p); !ok || !m.ReadOnly {
			t.Errorf("main as the workspace: %s is not read-only: %v", p, targets(spec.Mounts))
		}
	}
}

// A worktree's main repository is mounted only when git linked the two;
// a .git file is workspace content, which a call may have written.
func TestSealWorktreeLinkRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, main, wt, admin string, spec *backend.SessionSpec)
		want   string // in the refusal; "" mounts nothing and opens
	}{
		{"plain directory named", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			etc := realTemp(t)
			writeGitFile(t, wt, etc)
		}, ""},
		{"names nothing", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			writeGitFile(t, wt, filepath.Join(main, "nowhere"))
		}, ""},
		{"link back elsewhere", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			writeFile(t, filepath.Join(admin, "gitdir"), "/elsewhere/.git\n")
		}, "leads to /elsewhere/.git"},
		{"link back missing", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			if err := os.Remove(filepath.Join(admin, "gitdir")); err != nil {
				t.Fatal(err)
			}
		}, "missing or no file"},
		{"link back a symlink", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			writeFile(t, filepath.Join(main, "back"), wt+"/.git\n")
			if err := os.Remove(filepath.Join(admin, "gitdir")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(main, "back"), filepath.Join(admin, "gitdir")); err != nil {
				t.Fatal(err)
			}
		}, "missing or no file"},
		{"not under worktrees", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			moved := filepath.Join(main, ".git/elsewhere")
			if err := os.Rename(admin, moved); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(moved, "commondir"), "..\n")
			writeGitFile(t, wt, moved)
		}, "worktrees/"},
		{"no repository", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			if err := os.RemoveAll(filepath.Join(main, ".git/objects")); err != nil {
				t.Fatal(err)
			}
		}, "HEAD, objects/ and refs/"},
		{"objects a symlink", func(t *testing.T, main, wt, admin string, _ *backend.SessionSpec) {
			g := filepath.Join(main, ".git")
			if err := os.Rename(filepath.Join(g, "objects"), filepath.Join(main, "objects")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(main, "objects"), filepath.Join(g, "objects")); err != nil {
				t.Fatal(err)
			}
		}, "HEAD, objects/ and refs/"},
		{"another owner", func(t *testing.T, main, wt, admin string, spec *backend.SessionSpec) {
			spec.UID++
		}, fmt.Sprintf("belongs to uid %d", os.Getuid())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			main, wt := realTemp(t), realTemp(t)
			admin := linkedRepo(t, main, wt)
			spec := newSpec(t, wt)
			tc.mutate(t, main, wt, admin, spec)
			err := Seal(spec)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				for _, m := range spec.Mounts {
					if !within(m.Target, wt) {
						t.Errorf("%s is mounted: %v", m.Target, targets(spec.Mounts))
					}
				}
				return
			}
			if !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v; want ErrBadPath saying %q", err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeGitFile(t *testing.T, wt, gitdir string) {
	t.Helper()
	writeFile(t, filepath.Join(wt, ".git"), "gitdir: "+gitdir+"\n")
}

func TestVerifyAndCompare(t *testing.T) {
	ws, ro := realTemp(t), realTemp(t)
	mkdirs(t, filepath.Join(ro, "d"))
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := newSpec(t, ws,
		backend.Mount{Source: filepath.Join(ro, "d"), Target: filepath.Join(ro, "d"), ReadOnly: true},
		backend.Mount{Source: filepath.Join(ro, "f"), Target: filepath.Join(ro, "f"), ReadOnly: true})
	if err := Seal(spec); err != nil {
		t.Fatal(err)
	}
	sealed := &Sealed{Mounts: slices.Clone(spec.Mounts), Identities: spec.Identities}
	if err := Verify(spec); err != nil {
		t.Fatal(err)
	}
	// A regular file rewritten by replacement is the same path: fine.
	if err := os.WriteFile(filepath.Join(ro, "f.new"), []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(ro, "f.new"), filepath.Join(ro, "f")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(spec); err != nil {
		t.Errorf("after a file was rewritten: %v", err)
	}
	// A directory replaced, or a symlink on the way: refused.
	if err := os.Rename(filepath.Join(ro, "d"), filepath.Join(ro, "d.old")); err != nil {
		t.Fatal(err)
	}
	mkdirs(t, filepath.Join(ro, "d"))
	if err := Verify(spec); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "another file") {
		t.Errorf("directory replaced: %v, want ErrChanged", err)
	}
	os.Remove(filepath.Join(ro, "d"))
	if err := os.Symlink(filepath.Join(ro, "d.old"), filepath.Join(ro, "d")); err != nil {
		t.Fatal(err)
	}
	if err := Verify(spec); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("directory swapped for a symlink: %v, want ErrChanged saying so", err)
	}
	// A spec Seal never saw is refused.
	if err := Verify(newSpec(t, ws)); !errors.Is(err, ErrBadPath) {
		t.Errorf("unsealed spec: %v, want ErrBadPath", err)
	}

	// Reopened: the same target from another source is refused, as is a
	// recorded path that now leads elsewhere.
	spec2 := newSpec(t, ws, backend.Mount{Source: filepath.Join(ro, "d.old"), Target: filepath.Join(ro, "d"), ReadOnly: true})
	if err := Seal(spec2); err != nil {
		t.Fatal(err)
	}
	if err := Compare(sealed, spec2); !errors.Is(err, ErrChanged) {
		t.Errorf("Compare with a target's source changed: %v, want ErrChanged", err)
	}
	if err := Compare(nil, spec2); err != nil {
		t.Errorf("Compare(nil): %v", err)
	}
	if err := Compare(&Sealed{Identities: map[string]backend.FileID{ws: {Dev: 1, Ino: 1, Type: 0o040000}}}, spec2); !errors.Is(err, ErrChanged) {
		t.Errorf("Compare with the workspace's identity changed: %v, want ErrChanged", err)
	}
}

func TestKnownSocketsIncludeDockerContext(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("DOCKER_CONFIG", cfg)
	t.Setenv("DOCKER_CONTEXT", "")
	t.Setenv("DOCKER_HOST", "")
	writeContext(t, cfg, "colima", "unix:///srv/colima/docker.sock")
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"currentContext":"colima"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	socks := knownSockets()
	for _, p := range []string{"/srv/colima/docker.sock", "/srv/colima", "/srv"} {
		if err := checkPaths(p, p, socks); !errors.Is(err, ErrControlSocket) || !strings.Contains(err.Error(), `"colima"`) {
			t.Errorf("checkPaths(%s) = %v, want ErrControlSocket naming the context", p, err)
		}
	}
	if err := checkPaths("/srv/other", "/srv/other", socks); err != nil {
		t.Errorf("checkPaths(/srv/other) = %v", err)
	}
}

// writeContext writes a docker CLI context as `docker context create`
// does: its meta directory is named by the SHA-256 of its name.
func writeContext(t *testing.T, cfg, name, host string) {
	t.Helper()
	sum := sha256.Sum256([]byte(name))
	dir := filepath.Join(cfg, "contexts/meta", hex.EncodeToString(sum[:]))
	mkdirs(t, dir)
	meta := `{"Name":"` + name + `","Endpoints":{"docker":{"Host":"` + host + `"}}}`
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), []byte(meta), 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzPin checks pin against its promise: afterwards no directory on the
// way to the target can be moved by a call (each is a mount point, in a
// read-only mount, or outside every mount), and every pin binds a path
// onto itself within the writable mount it lies in.
func FuzzPin(f *testing.F) {
	for _, s := range []string{"/ws/a/b/c", "/ws", "/ws/ro/x/y", "/other/z", "/ws/rw/deep/er", "/"} {
		f.Add(s)
	}
	user := []backend.Mount{
		{Source: "/host/ws", Target: "/ws"},
		{Source: "/host/ws/ro", Target: "/ws/ro", ReadOnly: true},
		{Source: "/host/elsewhere", Target: "/ws/rw"},
		{Source: "/host/other", Target: "/other", ReadOnly: true},
	}
	f.Fuzz(func(t *testing.T, p string) {
		target := filepath.Clean("/" + p)
		s := &sealer{user: user, mounts: slices.Clone(user)}
		s.pin(target)
		for _, c := range prefixes(target) {
			if _, ok := s.target(c); ok {
				continue
			}
			if m, ok := s.innermost(c); ok && !m.ReadOnly {
				t.Fatalf("after pin(%s): %s lies in writable %s and is no mount point", target, c, m.Target)
			}
		}
		for _, m := range s.mounts[len(user):] {
			in, ok := (&sealer{mounts: user}).innermost(m.Target)
			if !ok || in.ReadOnly || m.Source != join(in.Source, rel(m.Target, in.Target)) {
				t.Fatalf("pin %+v does not bind its own path in a writable mount", m)
			}
		}
	})
}
