package backendtest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// testMountSwap: a call cannot redirect what a later call mounts. Extra
// paths inside the workspace (and a workspace inside a --writable path)
// cannot be swapped for a symlink to a host directory, even through a
// parent directory; host paths a call cannot reach are re-checked before
// every sandbox, so a swap made on the host is refused rather than mounted;
// and sources that cannot be held in place (cache and session directories
// inside a writable mount) are refused when the session opens.
func testMountSwap(f *fixture) {
	// The attacks point their symlinks at the host's root, relatively, so
	// that the destination also resolves in every sandbox. The canary is in
	// the host's /tmp.
	canaryDir, err := os.MkdirTemp("/tmp", "sbcanary-")
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { os.RemoveAll(canaryDir) })
	if err := os.WriteFile(filepath.Join(canaryDir, "canary"), []byte("host secret\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(canaryDir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	name := filepath.Base(canaryDir)
	look := fmt.Sprintf("for p in /tmp/%[1]s/canary vendor/tmp/%[1]s/canary a/b/tmp/%[1]s/canary %[1]s/canary; do [ -r $p ] && cat $p; done; echo looked", name)

	ws := f.dir("ws")
	writeFiles(f, ws, map[string]string{"vendor/orig": "vendor\n", "a/b/orig": "nested\n"})
	cfg := sandbash.Config{Workspace: ws, Readable: []string{filepath.Join(ws, "vendor")}, Writable: []string{filepath.Join(ws, "a/b")}}
	s := f.open(cfg)
	f.expect(s, "cat vendor/orig a/b/orig", 0, "vendor\nnested\n")
	// The attack: replace each extra path, or a directory above it, by a
	// symlink to the host directory.
	f.run(s, fmt.Sprintf(`{ rm -rf vendor; ln -s %[1]s vendor
mv a a.old && mkdir a && ln -s %[2]s a/b
mv vendor vendor.old && ln -s %[1]s vendor; } 2>/dev/null; true`, up(ws), up(filepath.Join(ws, "a"))))
	for range 2 { // containers prepared during the attack, then after it
		f.expect(s, look, 0, "looked\n")
	}
	f.expect(f.open(cfg), look, 0, "looked\n")
	for _, p := range []string{"vendor", "a", "a/b"} {
		if fi, err := os.Lstat(filepath.Join(ws, p)); err != nil || !fi.IsDir() {
			f.t.Errorf("%s on the host is no longer the directory it was: %v %v", p, fi, err)
		}
	}

	// A workspace inside a writable path: its parent cannot be swapped.
	outer := f.dir("outer")
	inner := f.dir("outer/mid/proj")
	s2 := f.open(sandbash.Config{Workspace: inner, Writable: []string{outer}})
	f.run(s2, fmt.Sprintf("{ cd %s && mv mid mid.old && mkdir mid && ln -s %s mid/proj; } 2>/dev/null; true", outer, up(filepath.Join(outer, "mid"))))
	for range 2 {
		f.expect(s2, look, 0, "looked\n")
	}

	// A host path the sandbox cannot reach, swapped on the host after the
	// session opened: no call mounts what it now leads to.
	ro := f.dir("ro")
	writeFiles(f, ro, map[string]string{"orig": "checked\n"})
	s3 := f.open(sandbash.Config{Workspace: f.dir("ws3"), Readable: []string{ro}})
	f.expect(s3, "cat "+ro+"/orig", 0, "checked\n")
	// Containers prepared ahead are set up before the swap; the ones
	// prepared after it are the point.
	if err := s3.WaitWarm(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Rename(ro, ro+".old"); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink("/tmp", ro); err != nil {
		f.t.Fatal(err)
	}
	refused := false
	for i := range 3 {
		marker := filepath.Join(f.base, "ws3", fmt.Sprintf("ran%d", i))
		r, err := s3.Run(f.ctx, sandbash.Request{Command: "touch " + marker + "; cd " + ro + " && " + look})
		if err != nil {
			if !errors.Is(err, workspace.ErrChanged) {
				f.t.Errorf("call after the host swap: %v, want workspace.ErrChanged", err)
			}
			if _, serr := os.Stat(marker); serr == nil {
				f.t.Error("a refused call ran")
			}
			refused = true
			break
		}
		if strings.Contains(r.Output, "host secret") {
			f.t.Errorf("a call mounted what the swapped path leads to now: %q", r.Output)
		}
	}
	if !refused {
		f.t.Error("calls went on after a mount source was swapped on the host; want workspace.ErrChanged")
	}

	// Sources that no mount can hold in place are refused at open.
	caches := []overlay.Cache{{Name: "custom", Host: filepath.Join(ws, "vendor"), Target: "/home/sandbash/.cache/x"}}
	for name, cfg := range map[string]sandbash.Config{
		"a cache directory inside the workspace":   {Workspace: ws, Caches: caches},
		"a session directory inside the workspace": {Workspace: ws, Dir: filepath.Join(ws, "session")},
	} {
		cfg.Image = f.caps.Image
		s, err := sandbash.Open(f.ctx, f.b, cfg)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, workspace.ErrNested) {
			f.t.Errorf("%s: Open = %v, want workspace.ErrNested", name, err)
		}
	}
}

// up is the relative path from dir to /.
func up(dir string) string {
	return strings.Repeat("../", strings.Count(filepath.Clean(dir), "/"))
}

// probeSource is a static program the sandbox runs to try unix sockets
// (bash cannot, and busybox's nc has no -U): it prints "connected PATH" for
// each path it could connect to; with -serve PATH it listens there.
const probeSource = `package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	if len(os.Args) == 3 && os.Args[1] == "-serve" {
		l, err := net.Listen("unix", os.Args[2])
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				os.Exit(1)
			}
			c.Close()
		}
	}
	for _, p := range os.Args[1:] {
		if c, err := net.Dial("unix", p); err == nil {
			c.Close()
			fmt.Println("connected", p)
		}
	}
}
`

// buildProbe builds the socket probe into its own directory under the
// fixture and returns the binary's path; mount its directory readable.
func buildProbe(f *fixture) string {
	f.t.Helper()
	dir := f.dir("probe")
	src := filepath.Join(dir, "probe.go")
	if err := os.WriteFile(src, []byte(probeSource), 0o644); err != nil {
		f.t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command(hostGo(f), "build", "-o", bin, src)
	cmd.Dir = dir // outside any module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("building the socket probe: %v\n%s", err, out)
	}
	return bin
}

// hostListener is a unix socket a host process listens on; it counts the
// connections that reach it from other processes (this one checks, when a
// session opens, which sockets are listened on).
type hostListener struct {
	l        *net.UnixListener
	accepted atomic.Int64
}

// fromSelf reports whether the peer of c is this process.
func fromSelf(c net.Conn) bool {
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return false
	}
	self := false
	_ = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		self = err == nil && int(cred.Pid) == os.Getpid()
	})
	return self
}

func listen(f *fixture, path string) *hostListener {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		f.t.Fatal(err)
	}
	// Open to everyone, so that only the sandbox can stop a connection.
	if err := os.Chmod(path, 0o777); err != nil {
		f.t.Fatal(err)
	}
	h := &hostListener{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !fromSelf(c) {
				h.accepted.Add(1)
			}
			c.Close()
		}
	}()
	f.t.Cleanup(func() { l.Close() })
	return h
}

// testHostSocket: a unix socket a host process listens on inside a mounted
// tree (the workspace, a readable path) is not reachable from a call, not
// even after the call moves the directories above it; a stale socket (no
// listener) stays an ordinary file; a cache directory holding a live socket
// is refused.
func testHostSocket(f *fixture) {
	probe := buildProbe(f)
	ws, ro := f.dir("ws"), f.dir("ro")
	socks := map[string]*hostListener{
		"ws top":     listen(f, filepath.Join(ws, "agent.sock")),
		"ws deep":    listen(f, filepath.Join(ws, "deep/er/daemon.sock")),
		"ws in .git": listen(f, filepath.Join(ws, ".git/fsmonitor--daemon.ipc")),
		"readable":   listen(f, filepath.Join(ro, "sub/ro.sock")),
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(ws, "stale.sock"), Net: "unix"})
	if err != nil {
		f.t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	writeFiles(f, ws, map[string]string{"keep": ""})
	s := f.open(sandbash.Config{Workspace: ws, Readable: []string{ro, filepath.Dir(probe)}})
	paths := []string{"agent.sock", "deep/er/daemon.sock", ".git/fsmonitor--daemon.ipc", ro + "/sub/ro.sock"}
	f.expect(s, probe+" "+strings.Join(paths, " "), 0, "")
	// Move what is above the sockets, link to them, and try again; then in
	// the next calls, try every place they could now be.
	f.run(s, `{ mv deep deep2; mv deep2/er deep2/er2; ln agent.sock hard.sock; mv .git git2; cp -a agent.sock copy.sock; } 2>/dev/null
`+probe+` deep2/er2/daemon.sock deep2/er/daemon.sock deep/er2/daemon.sock hard.sock git2/fsmonitor--daemon.ipc copy.sock; true`)
	all := append(paths, "deep2/er2/daemon.sock", "deep2/er/daemon.sock", "deep/er2/daemon.sock", "hard.sock", "git2/fsmonitor--daemon.ipc", "copy.sock")
	for range 2 {
		f.expect(s, probe+" "+strings.Join(all, " ")+"; true", 0, "")
	}
	f.expect(f.open(sandbash.Config{Workspace: ws, Readable: []string{ro, filepath.Dir(probe)}}), probe+" "+strings.Join(all, " ")+"; true", 0, "")
	for name, h := range socks {
		if n := h.accepted.Load(); n > 0 {
			f.t.Errorf("the host socket (%s) accepted %d connections from the sandbox", name, n)
		}
	}
	// The probe works: a socket the call listens on itself is reachable.
	f.expect(s, probe+" -serve /tmp/own.sock & while [ ! -S /tmp/own.sock ]; do sleep 0.05; done; "+probe+" /tmp/own.sock; kill %1", 0, "connected /tmp/own.sock\n")
	// Only live sockets are masked: a stale one can be removed.
	f.expect(s, "rm stale.sock && echo removed", 0, "removed\n")

	cache := f.dir("cache")
	listen(f, filepath.Join(cache, "sub/cache.sock"))
	cfg := sandbash.Config{Workspace: f.dir("ws2"), Image: f.caps.Image,
		Caches: []overlay.Cache{{Name: "custom", Host: cache, Target: "/home/sandbash/.cache/x"}}}
	if s, err := sandbash.Open(f.ctx, f.b, cfg); !errors.Is(err, workspace.ErrSocket) {
		if err == nil {
			s.Close()
		}
		f.t.Errorf("a cache holding a live socket: Open = %v, want workspace.ErrSocket", err)
	}
}

// git runs the host's git in dir, ignoring the caller's configuration.
func git(f *fixture, dir string, args ...string) string {
	f.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "safe.directory=*", "-c", "user.name=suite", "-c", "user.email=suite@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		f.t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return string(out)
}

// chownTree hands a tree the fixture built as root to the workspace owner.
func chownTree(f *fixture, root string) {
	f.t.Helper()
	if os.Getuid() != 0 {
		return
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, f.uid, f.gid)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// gitState fingerprints what must not change in a repository's git
// directory: config, hooks, info, commondir, and the directory itself.
func gitState(f *fixture, gitdir string) string {
	f.t.Helper()
	var b strings.Builder
	fi, err := os.Lstat(gitdir)
	if err != nil {
		return "missing: " + err.Error()
	}
	fmt.Fprintf(&b, "%s %v ino %d\n", filepath.Base(gitdir), fi.Mode(), fi.Sys().(*syscall.Stat_t).Ino)
	for _, p := range []string{"config", "commondir", "config.worktree", "gitdir"} {
		if c, err := os.ReadFile(filepath.Join(gitdir, p)); err == nil {
			fmt.Fprintf(&b, "%s: %q\n", p, c)
		}
	}
	for _, d := range []string{"hooks", "info"} {
		if _, err := os.Lstat(filepath.Join(gitdir, d)); err == nil {
			b.WriteString(hashTree(f, filepath.Join(gitdir, d)) + "\n")
		}
	}
	return b.String()
}

// testGit: .git is not a way out. Inside a call the hooks, config and info
// of the workspace's repository (and of its submodules, and of the main
// repository of a linked worktree when it is mounted) are read-only, and
// neither .git nor the worktree's .git file can be moved, removed or
// replaced; the rest of .git stays writable, so git add and git commit work.
func testGit(f *fixture) {
	ws := f.dir("ws")
	writeFiles(f, ws, map[string]string{"file.txt": "one\n"})
	git(f, ws, "init", "-q")
	git(f, ws, "add", "file.txt")
	git(f, ws, "commit", "-qm", "first")
	// A repository without hooks/ (a call could create it) and with an
	// absorbed submodule's git directory.
	if err := os.RemoveAll(filepath.Join(ws, ".git/hooks")); err != nil {
		f.t.Fatal(err)
	}
	git(f, ws, "init", "-q", "--bare", ".git/modules/lib/foo")
	chownTree(f, ws)
	gitDir, modDir := filepath.Join(ws, ".git"), filepath.Join(ws, ".git/modules/lib/foo")
	s := f.open(sandbash.Config{Workspace: ws})
	if fi, err := os.Stat(filepath.Join(gitDir, "hooks")); err != nil || !fi.IsDir() {
		f.t.Errorf(".git/hooks was not created at open: %v", err)
	} else if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != f.uid {
		f.t.Errorf(".git/hooks was created owned by %d, want the workspace owner %d", st.Uid, f.uid)
	}
	before, modBefore := gitState(f, gitDir), gitState(f, modDir)
	attacks := `
{ echo 'echo pwned' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit; } 2>/dev/null && echo hook-written
{ printf '[core]\n\thooksPath = /tmp\n\tfsmonitor = "echo pwned"\n' >> .git/config; } 2>/dev/null && echo config-appended
{ cp .git/config .git/config.new && echo '[core]' >> .git/config.new && mv -f .git/config.new .git/config; } 2>/dev/null && echo config-replaced
rm -f .git/config 2>/dev/null && echo config-removed
{ mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes; } 2>/dev/null && echo attributes-written
mv .git/info .git/info.old 2>/dev/null && echo info-moved
mv .git/hooks .git/hooks.old 2>/dev/null && echo hooks-moved
{ mv .git .git.old && mkdir -p .git/hooks; } 2>/dev/null && echo git-moved
{ echo x > .git/modules/lib/foo/hooks/post-checkout; } 2>/dev/null && echo module-hook-written
{ echo '[core]' >> .git/modules/lib/foo/config; } 2>/dev/null && echo module-config-appended
{ mv .git/modules .git/modules.old && mkdir -p .git/modules/lib/foo/hooks; } 2>/dev/null && echo modules-moved
{ mv .git/modules/lib .git/modules/lib.old && mkdir -p .git/modules/lib/foo/hooks; } 2>/dev/null && echo module-parent-moved
echo scratch > .git/sandbash-scratch && rm .git/sandbash-scratch && echo git-writable
`
	f.expect(s, attacks, 0, "git-writable\n")
	r := f.run(s, "command -v git >/dev/null && echo yes")
	if f.caps.Image == "" && r.Output != "yes\n" {
		f.t.Error("no git in a sandbox that runs on the host's /usr (bwrap); git add and commit are not tested")
	}
	if r.Output == "yes\n" {
		// Real git in the sandbox (bwrap runs the host's): add and commit
		// work; writing the configuration does not.
		env := "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; "
		f.expect(s, env+"echo two >> file.txt && git add file.txt && git commit -qm second && git log --format=%s", 0, "second\nfirst\n")
		f.expect(s, "git config core.hooksPath /tmp 2>/dev/null || echo refused", 0, "refused\n")
	}
	if after := gitState(f, gitDir); after != before {
		f.t.Errorf("the repository's git directory changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	if after := gitState(f, modDir); after != modBefore {
		f.t.Errorf("the submodule's git directory changed:\nbefore\n%s\nafter\n%s", modBefore, after)
	}
	// Replacing .git by a symlink, last since it deletes what it can.
	f.run(s, "{ rm -rf .git; ln -s /tmp .git; } 2>/dev/null; true")
	if fi, err := os.Lstat(gitDir); err != nil || !fi.IsDir() {
		f.t.Errorf(".git on the host is no longer a directory: %v %v", fi, err)
	}
	for _, p := range []string{"config", "hooks", "info"} {
		if _, err := os.Lstat(filepath.Join(gitDir, p)); err != nil {
			f.t.Errorf(".git/%s was removed: %v", p, err)
		}
	}

	// A .git/commondir would make git on the host read another
	// repository's config and hooks; no mount can stop a call creating it
	// in the writable .git, so the next call is refused.
	ws2 := f.dir("ws2")
	git(f, ws2, "init", "-q")
	chownTree(f, ws2)
	s2 := f.open(sandbash.Config{Workspace: ws2})
	f.run(s2, "echo /tmp/elsewhere > .git/commondir")
	refused := false
	for range 3 {
		if _, err := s2.Run(f.ctx, sandbash.Request{Command: "true"}); err != nil {
			if !errors.Is(err, workspace.ErrChanged) || !strings.Contains(err.Error(), "commondir") {
				f.t.Errorf("after a call wrote .git/commondir: %v, want workspace.ErrChanged naming it", err)
			}
			refused = true
			break
		}
	}
	if !refused {
		f.t.Error("calls went on after one wrote .git/commondir")
	}

	// A linked worktree: its .git file cannot be rewritten, and when the
	// main repository is mounted writable, its hooks and config are
	// read-only too.
	main := f.dir("main")
	writeFiles(f, main, map[string]string{"m.txt": "m\n"})
	git(f, main, "init", "-q")
	git(f, main, "add", "m.txt")
	git(f, main, "commit", "-qm", "main")
	wt := filepath.Join(f.base, "wt")
	git(f, main, "worktree", "add", "-q", wt)
	chownTree(f, main)
	chownTree(f, wt)
	dotgit, _ := os.ReadFile(filepath.Join(wt, ".git"))
	mainBefore, adminBefore := gitState(f, filepath.Join(main, ".git")), gitState(f, filepath.Join(main, ".git/worktrees/wt"))
	for _, cfg := range []sandbash.Config{{Workspace: wt}, {Workspace: wt, Writable: []string{main}}} {
		s := f.open(cfg)
		f.expect(s, fmt.Sprintf(`
{ echo 'gitdir: /tmp/evil' > .git; } 2>/dev/null && echo dotgit-rewritten
{ rm -f .git && mkdir -p .git/hooks; } 2>/dev/null && echo dotgit-replaced
mv .git dotgit.old 2>/dev/null && echo dotgit-moved
cd %[1]s 2>/dev/null || { echo ok; exit 0; }
{ echo x > .git/hooks/pre-commit; } 2>/dev/null && echo main-hook-written
{ echo '[core]' >> .git/config; } 2>/dev/null && echo main-config-appended
{ echo /tmp/evil > .git/worktrees/wt/commondir; } 2>/dev/null && echo commondir-rewritten
{ mv .git/worktrees .git/worktrees.old && mkdir -p .git/worktrees/wt; } 2>/dev/null && echo worktrees-moved
echo ok
`, main), 0, "ok\n")
		if r := f.run(s, "command -v git >/dev/null && test -d "+main+" && echo yes"); r.Output == "yes\n" {
			env := "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; "
			f.expect(s, env+"echo w >> w.txt && git add w.txt && git commit -qm wt && git log --format=%s -1", 0, "wt\n")
		}
	}
	if got, _ := os.ReadFile(filepath.Join(wt, ".git")); string(got) != string(dotgit) {
		f.t.Errorf("the worktree's .git file changed: %q, was %q", got, dotgit)
	}
	if after := gitState(f, filepath.Join(main, ".git")); after != mainBefore {
		f.t.Errorf("the main repository's git directory changed:\nbefore\n%s\nafter\n%s", mainBefore, after)
	}
	if after := gitState(f, filepath.Join(main, ".git/worktrees/wt")); after != adminBefore {
		f.t.Errorf("the worktree's administrative directory changed:\nbefore\n%s\nafter\n%s", adminBefore, after)
	}
}

// hostGo finds the host's go command.
func hostGo(f *fixture) string {
	f.t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		f.t.Fatal("no Go toolchain on the host")
	}
	return "/usr/local/go/bin/go"
}
