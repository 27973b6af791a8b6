package backendtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/workspace"
)

// gitEnv names the commit's author and committer for git in a call.
const gitEnv = "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@b GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@b; "

// gitImage is the image with git in it (bwrap: "", the host's git).
func gitImage(f *fixture) string {
	if f.caps.GitImage != "" {
		return f.caps.GitImage
	}
	return f.caps.Image
}

// requireGit fails the test if the sandbox has no git to run.
func requireGit(f *fixture, s *sandbash.Session) {
	f.t.Helper()
	if r := f.run(s, "git --version >/dev/null 2>&1 && echo yes"); r.Output != "yes\n" {
		f.t.Fatalf("no git in the sandbox (image %q): the worktree tests need it. Build the test images again (scripts/images.sh builds sandbash-test-git; make images)", gitImage(f))
	}
}

// linkedWorktree makes a repository at base/name with one commit and a
// linked worktree of it at base/name-wt (branch name-wt), owned by owner.
func linkedWorktree(f *fixture, name string, owner int) (main, wt string) {
	f.t.Helper()
	main, wt = filepath.Join(f.base, name), filepath.Join(f.base, name+"-wt")
	if err := os.Mkdir(main, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(main, "m.txt"), []byte("m\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	git(f, main, "init", "-q")
	git(f, main, "add", "m.txt")
	git(f, main, "commit", "-qm", "main")
	git(f, main, "worktree", "add", "-q", wt)
	if os.Getuid() == 0 {
		for _, d := range []string{main, wt} {
			err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				return os.Lchown(p, owner, owner)
			})
			if err != nil {
				f.t.Fatal(err)
			}
		}
	}
	return main, wt
}

// testWorktree: with a linked worktree as the workspace, git works in a
// call (status, diff, add, commit), and the commit lands in the main
// repository on the host. Its git directory is mounted at its own path,
// writable, but its hooks, config and info, and every worktree's links
// (commondir, gitdir), are read-only and cannot be moved; the main
// worktree's files stay out of sight. A workspace that is the main
// repository cannot redirect its linked worktrees either.
func testWorktree(f *fixture) {
	main, wt := linkedWorktree(f, "main", f.uid)
	other := filepath.Join(f.base, "other")
	git(f, main, "worktree", "add", "-q", other)
	chownTree(f, other)
	chownTree(f, filepath.Join(main, ".git"))
	common := filepath.Join(main, ".git")
	states := func() string {
		return gitState(f, common) + gitState(f, filepath.Join(common, "worktrees/main-wt")) + gitState(f, filepath.Join(common, "worktrees/other"))
	}
	before := states()

	s := f.open(sandbash.Config{Workspace: wt, Image: gitImage(f)})
	requireGit(f, s)
	f.expect(s, gitEnv+`git status --porcelain && echo changed >> m.txt && git status --porcelain && git diff --name-only &&
git add m.txt && git commit -qm from-call && git status --porcelain && git log --format=%s`, 0,
		" M m.txt\nm.txt\nfrom-call\nmain\n")
	if got := git(f, main, "log", "--format=%s", "-1", "main-wt"); got != "from-call\n" {
		f.t.Errorf("the main repository's branch main-wt on the host: last commit %q, want from-call", got)
	}
	f.expect(s, fmt.Sprintf(`cd %s || exit 1
{ echo 'echo pwned' > hooks/pre-commit && chmod +x hooks/pre-commit; } 2>/dev/null && echo hook-written
{ printf '[core]\n\tfsmonitor = "echo pwned"\n' >> config; } 2>/dev/null && echo config-appended
{ cp config config.new && mv -f config.new config; } 2>/dev/null && echo config-replaced
{ mkdir -p info && echo '* filter=evil' > info/attributes; } 2>/dev/null && echo attributes-written
mv hooks hooks.old 2>/dev/null && echo hooks-moved
{ echo /tmp/evil > worktrees/main-wt/commondir; } 2>/dev/null && echo commondir-rewritten
{ echo /tmp/evil/.git > worktrees/main-wt/gitdir; } 2>/dev/null && echo gitdir-rewritten
{ echo /tmp/evil > worktrees/other/commondir; } 2>/dev/null && echo other-commondir-rewritten
rm -f worktrees/other/commondir 2>/dev/null && echo other-commondir-removed
mv worktrees/other worktrees/other.old 2>/dev/null && echo other-moved
{ mv worktrees worktrees.old && mkdir -p worktrees/main-wt; } 2>/dev/null && echo worktrees-moved
echo x > sandbash-scratch && rm sandbash-scratch && echo git-writable
test -e ../m.txt && echo main-worktree-visible
git config core.hooksPath /tmp 2>/dev/null && echo git-config-written
echo done
`, common), 0, "git-writable\ndone\n")
	if after := states(); after != before {
		f.t.Errorf("the main repository's git directory changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	// What the call created in the repository belongs to the workspace
	// owner on the host.
	checkOwned(f, filepath.Join(common, "objects"), f.uid)

	// The main repository as the workspace: its linked worktrees' links
	// are read-only there too.
	sm := f.open(sandbash.Config{Workspace: main, Image: gitImage(f)})
	f.expect(sm, `{ echo /tmp/evil > .git/worktrees/other/commondir; } 2>/dev/null && echo other-commondir-rewritten
rm -f .git/worktrees/main-wt/commondir 2>/dev/null && echo commondir-removed
mv .git/worktrees/other .git/worktrees/other.old 2>/dev/null && echo other-moved
echo done`, 0, "done\n")
	if after := states(); after != before {
		f.t.Errorf("from the main repository, a call changed its worktrees' links:\nbefore\n%s\nafter\n%s", before, after)
	}

	// A repository that belongs to root, opened by root: the calls run as
	// the sandbox user through idmapped mounts, and what git writes into
	// the main repository belongs to root on the host.
	if os.Getuid() != 0 {
		return
	}
	rmain, rwt := linkedWorktree(f, "rootmain", 0)
	if f.rootRefused(rwt) {
		return
	}
	rs := f.open(sandbash.Config{Workspace: rwt, Image: gitImage(f)})
	f.expect(rs, gitEnv+"id -u; echo r > r.txt && git add r.txt && git commit -qm as-root && git log --format=%s -1", 0,
		fmt.Sprintf("%d\nas-root\n", backend.SandboxUID))
	if got := git(f, rmain, "log", "--format=%s", "-1", "rootmain-wt"); got != "as-root\n" {
		f.t.Errorf("root's repository on the host: last commit %q, want as-root", got)
	}
	checkOwned(f, filepath.Join(rmain, ".git/objects"), 0)
	f.expect(rs, fmt.Sprintf("{ echo x > %s/.git/hooks/pre-commit; } 2>/dev/null && echo hook-written; echo done", rmain), 0, "done\n")
}

// checkOwned fails the test if anything under root belongs to another uid.
func checkOwned(f *fixture, root string, uid int) {
	f.t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != uid {
			return fmt.Errorf("%s belongs to uid %d, want %d", p, got, uid)
		}
		return nil
	})
	if err != nil {
		f.t.Error(err)
	}
}

// testWorktreePlanted: a .git file is workspace content, which a call
// can write. One that names a directory outside as its git directory does
// not get that directory mounted: not a plain directory (standing for
// /etc), not another repository's worktree directory (whose link back
// leads to its own worktree), not a repository of another user. A real
// worktree whose link back does not match (it was moved) is refused with
// what to do, and works once repaired.
func testWorktreePlanted(f *fixture) {
	// An "/etc" the user can write, so that only the policy stands between
	// it and a call.
	etc := f.dir("etc")
	writeFiles(f, etc, map[string]string{"passwd": "root:x:0:0::/root:/bin/bash\n"})
	ws := f.dir("ws")
	s := f.open(sandbash.Config{Workspace: ws})
	f.run(s, fmt.Sprintf("printf 'gitdir: %s\\n' > .git", etc))
	s2 := f.open(sandbash.Config{Workspace: ws})
	f.expect(s2, fmt.Sprintf("{ echo pwned > %[1]s/pwned; } 2>/dev/null && echo written; test -e %[1]s/passwd && echo visible; echo done", etc), 0, "done\n")
	if _, err := os.Lstat(filepath.Join(etc, "pwned")); err == nil {
		f.t.Error("a call wrote into the directory a planted .git file named")
	}

	// Another repository's linked worktree: its directory under
	// victim/.git/worktrees links back to the victim's worktree, not here.
	victim, _ := linkedWorktree(f, "victim", f.uid)
	vadmin := filepath.Join(victim, ".git/worktrees/victim-wt")
	ws2 := f.dir("ws2")
	f.run(f.open(sandbash.Config{Workspace: ws2}), fmt.Sprintf("printf 'gitdir: %s\\n' > .git", vadmin))
	vBefore := hashTree(f, filepath.Join(victim, ".git"))
	refused(f, sandbash.Config{Workspace: ws2, Image: gitImage(f)}, filepath.Join(victim, ".git"), "victim-wt/gitdir", "leads to "+filepath.Join(f.base, "victim-wt/.git"))
	if after := hashTree(f, filepath.Join(victim, ".git")); after != vBefore {
		f.t.Errorf("the victim repository changed:\nbefore\n%s\nafter\n%s", vBefore, after)
	}

	// A worktree moved without telling git: refused, with the repair.
	main, wt := linkedWorktree(f, "moved", f.uid)
	moved := wt + "-moved"
	if err := os.Rename(wt, moved); err != nil {
		f.t.Fatal(err)
	}
	refused(f, sandbash.Config{Workspace: moved, Image: gitImage(f)}, filepath.Join(main, ".git"), "git worktree repair")
	git(f, moved, "worktree", "repair")
	chownTree(f, filepath.Join(main, ".git"))
	chownTree(f, moved)
	ms := f.open(sandbash.Config{Workspace: moved, Image: gitImage(f)})
	requireGit(f, ms)
	f.expect(ms, gitEnv+"echo x > x.txt && git add x.txt && git commit -qm repaired && git log --format=%s -1", 0, "repaired\n")

	// A repository that belongs to someone else than the workspace owner.
	if os.Getuid() != 0 {
		return
	}
	rmain, rwt := linkedWorktree(f, "others", 0)
	chownTree(f, rwt)
	rBefore := hashTree(f, filepath.Join(rmain, ".git"))
	refused(f, sandbash.Config{Workspace: rwt, Image: gitImage(f)}, filepath.Join(rmain, ".git"), "uid 0")
	if after := hashTree(f, filepath.Join(rmain, ".git")); after != rBefore {
		f.t.Errorf("root's repository changed:\nbefore\n%s\nafter\n%s", rBefore, after)
	}
}

// refused opens a session with cfg and fails the test unless it is
// refused (workspace.ErrBadPath) with a message naming every one of want.
// If it opens, a call tries to write into dir, the git directory that
// must not be mounted.
func refused(f *fixture, cfg sandbash.Config, dir string, want ...string) {
	f.t.Helper()
	s, err := sandbash.Open(f.ctx, f.b, cfg)
	if err == nil {
		r, rerr := s.Run(f.ctx, sandbash.Request{Command: fmt.Sprintf("echo pwned > %s/pwned 2>/dev/null && echo written; ls %s 2>/dev/null | head -1", dir, dir)})
		_ = s.Close()
		_ = os.Remove(filepath.Join(dir, "pwned"))
		out := ""
		if r != nil {
			out = r.Output
		}
		f.t.Errorf("workspace %s opened, want a refusal to mount %s; a call there: %q %v", cfg.Workspace, dir, out, rerr)
		return
	}
	if !errors.Is(err, workspace.ErrBadPath) {
		f.t.Errorf("workspace %s: %v, want workspace.ErrBadPath", cfg.Workspace, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			f.t.Errorf("workspace %s: %v; want it to say %q", cfg.Workspace, err, w)
		}
	}
}
