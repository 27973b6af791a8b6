package workspace

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// Git runs code from a repository's metadata: hooks, and commands its
// configuration names (core.fsmonitor, core.hooksPath, filter and diff
// drivers, aliases, the pager, ...), selected by info/attributes. A call
// that could write them would have git on the host run its code, the next
// time the user (or their IDE, in the background) runs git in the
// workspace. So in every call, for the repository at the root of every
// writable mount (its .git, or the mount itself if it is a bare
// repository), Seal mounts hooks/, info/ and config read-only and pins
// .git (it cannot be moved, removed or replaced by a symlink); the same for
// the git directories of its submodules under .git/modules. Everything
// else in .git stays writable, so git add and git commit work.
//
// A linked worktree's (or submodule's) .git is a file naming its git
// directory: the file is mounted read-only, and the git directory and the
// repository's common directory it names are protected the same way where
// they are mounted writable. A linked worktree's common directory (the
// main repository's .git) that the sandbox would not see is mounted for it
// (see linkWorktrees); in a repository's own git directory, every linked
// worktree's links (worktrees/NAME/commondir and gitdir) are read-only, so
// a call cannot point git, in another worktree on the host, at a
// configuration of its choosing.
//
// What no mount can stop: a new file in the writable .git. A
// .git/commondir would make git take the configuration and hooks from the
// directory it names; Seal records that it must not exist, and Verify
// refuses every call once it does.

// maxModuleDepth bounds the search for submodules' git directories.
const maxModuleDepth = 8

// protectGit protects the repository at the root of the writable mount w:
// its .git, or w itself when it is a git directory (a bare repository, which
// runs hooks when the user pushes to it).
func (s *sealer) protectGit(w backend.Mount) error {
	if isGitDir(w.Source) {
		if err := s.gitDir(w.Source, 0); err != nil {
			return err
		}
	}
	g := filepath.Join(w.Source, ".git")
	fi, err := os.Lstat(g)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, unix.ENOTDIR):
		return nil // nothing there, or w is a file
	case err != nil:
		return fmt.Errorf("workspace: %v: %w", err, ErrBadPath)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("workspace: %s is a symlink; sandbash can keep git's hooks and configuration out of a call's reach only when .git is a directory or a \"gitdir:\" file. Replace the symlink with a file holding \"gitdir: <its target>\": %w", g, ErrBadPath)
	case fi.IsDir():
		return s.gitDir(g, 0)
	case fi.Mode().IsRegular():
		t := filepath.Join(w.Target, ".git")
		s.add(backend.Mount{Source: g, Target: t, ReadOnly: true})
		s.pin(t)
		dir, err := gitFileTarget(g)
		if err != nil || dir == "" {
			return nil // git cannot use it either
		}
		return s.gitDir(dir, 0)
	}
	return nil
}

// gitFileTarget reads a "gitdir: PATH" file and returns PATH resolved (real,
// absolute), or "" if it names nothing that exists.
func gitFileTarget(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return "", nil
	}
	return resolveFrom(filepath.Dir(file), strings.TrimSpace(dir))
}

// resolveFrom resolves p (relative to base if it is not absolute) to a real
// path; "" if it does not exist.
func resolveFrom(base, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	r, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return r, err
}

// gitDir protects the git directory at host path dir wherever the sandbox
// can write it, and the common directory and submodule git directories it
// leads to.
func (s *sealer) gitDir(dir string, depth int) error {
	if s.gitSeen[dir] || depth > maxModuleDepth {
		return nil
	}
	s.gitSeen[dir] = true
	var views []string
	for _, t := range s.views(dir) {
		if s.writable(t) {
			views = append(views, t)
		}
	}
	common, err := resolveFrom(dir, readTrimmed(filepath.Join(dir, "commondir")))
	if err != nil {
		return fmt.Errorf("workspace: %s: %v: %w", filepath.Join(dir, "commondir"), err, ErrBadPath)
	}
	if common == "" {
		if _, err := os.Lstat(filepath.Join(dir, "commondir")); err == nil {
			common = dir // names nothing: git fails on it, nothing to follow
		}
	}
	if len(views) > 0 {
		// What git reads from this directory; with a common directory
		// elsewhere (a linked worktree's), only commondir and
		// config.worktree are read here, and gitdir, its link back to
		// the worktree, is written by git worktree repair.
		var ro []string
		if common != "" {
			ro = []string{"commondir"}
			if _, err := os.Lstat(filepath.Join(dir, "gitdir")); err == nil {
				ro = append(ro, "gitdir")
			}
		} else {
			s.absent = append(s.absent, filepath.Join(dir, "commondir"))
			ro = []string{"hooks", "info", "config"}
			for _, d := range []string{"hooks", "info"} {
				if err := s.ensure(dir, d, true); err != nil {
					return err
				}
			}
			if err := s.ensure(dir, "config", false); err != nil {
				return err
			}
		}
		cfgDir := dir
		if common != "" && common != dir {
			cfgDir = common
		}
		if worktreeConfig(filepath.Join(cfgDir, "config")) {
			if err := s.ensure(dir, "config.worktree", false); err != nil {
				return err
			}
		}
		if _, err := os.Lstat(filepath.Join(dir, "config.worktree")); err == nil {
			ro = append(ro, "config.worktree")
		}
		for _, name := range ro {
			p := filepath.Join(dir, name)
			fi, err := os.Lstat(p)
			if err != nil {
				return fmt.Errorf("workspace: %v: %w", err, ErrBadPath)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("workspace: %s is a symlink; sandbash cannot keep what it leads to out of a call's reach. Replace it with what it points to: %w", p, ErrBadPath)
			}
			for _, t := range views {
				s.add(backend.Mount{Source: p, Target: filepath.Join(t, name), ReadOnly: true})
				s.pin(filepath.Join(t, name))
			}
		}
	}
	if common != "" && common != dir {
		if err := s.gitDir(common, depth+1); err != nil {
			return err
		}
	}
	// Submodules' git directories: a linked worktree has its own, under
	// its directory in worktrees/.
	next := moduleGitDirs(filepath.Join(dir, "modules"), 0)
	if common == "" {
		// The linked worktrees' directories: a call that rewrote or
		// removed one's commondir would have git, in that worktree on the
		// host, take the configuration and hooks from where it chose.
		next = append(next, linkedGitDirs(dir)...)
	}
	for _, d := range next {
		if err := s.gitDir(d, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// linkedGitDirs lists the directories of a repository's linked worktrees,
// in its git directory's worktrees/ (not following symlinks).
func linkedGitDirs(dir string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, "worktrees"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(dir, "worktrees", e.Name()))
		}
	}
	return out
}

// ensure creates name in the git directory dir if it is missing (a
// directory, or an empty file), owned like the sandbox's user, so that a
// call cannot be the one to create it. It never follows a symlink.
func (s *sealer) ensure(dir, name string, isDir bool) error {
	fd, err := openNoFollow(dir)
	if err != nil {
		return fmt.Errorf("workspace: %s: %v: %w", dir, err, ErrBadPath)
	}
	defer unix.Close(fd)
	if isDir {
		err = unix.Mkdirat(fd, name, 0o755)
	} else {
		var f int
		f, err = unix.Openat(fd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(f)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("workspace: creating %s, so that a call cannot create it, failed (%v); create it yourself: %w", filepath.Join(dir, name), err, ErrBadPath)
	}
	if os.Geteuid() == 0 {
		if err := unix.Fchownat(fd, name, s.spec.UID, s.spec.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("workspace: %s: %v: %w", filepath.Join(dir, name), err, ErrBadPath)
		}
	}
	return nil
}

// openNoFollow opens p as an O_PATH descriptor, refusing a symlink anywhere
// on the way.
func openNoFollow(p string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range components(p) {
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

func readTrimmed(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// worktreeConfig reports whether a git config file may turn on
// extensions.worktreeConfig (then git also reads config.worktree). It
// errs towards yes: any mention counts.
func worktreeConfig(config string) bool {
	b, err := os.ReadFile(config)
	return err == nil && bytes.Contains(bytes.ToLower(b), []byte("worktreeconfig"))
}

// isGitDir reports whether dir looks like a git directory: git needs HEAD
// and objects/ (or a commondir that holds them).
func isGitDir(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, "HEAD")); err != nil {
		return false
	}
	if fi, err := os.Lstat(filepath.Join(dir, "objects")); err == nil && fi.IsDir() {
		return true
	}
	_, err := os.Lstat(filepath.Join(dir, "commondir"))
	return err == nil
}

// moduleGitDirs finds the submodules' git directories under a modules/
// directory (a submodule's name may hold slashes); it does not look inside
// the git directories it finds (their own modules/ are searched by gitDir).
func moduleGitDirs(dir string, depth int) []string {
	entries, err := os.ReadDir(dir)
	if err != nil || depth > maxModuleDepth {
		return nil
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if isGitDir(p) {
			out = append(out, p)
		} else {
			out = append(out, moduleGitDirs(p, depth+1)...)
		}
	}
	return out
}

// A linked worktree's git needs its main repository's git directory (the
// common directory: objects, refs, the worktree's own directory under
// worktrees/). When a writable mount is a linked worktree and the sandbox
// would not see that directory, linkWorktrees mounts it at its own path,
// writable, and protectGit then protects it like any repository. But the
// .git file that names it is workspace content, which a call may have
// written: the directory is mounted only when git itself linked the two.
// Taking the .git file's "gitdir:" (the worktree's directory, A) and A's
// commondir (the common directory, C) with symlinks resolved:
//
//   - A is C/worktrees/NAME, where git puts it;
//   - C holds a repository: HEAD, objects/ and refs/;
//   - C and A belong to the workspace's owner (git in a call refuses
//     another's repository anyway, as "dubious ownership");
//   - A/gitdir, the link back that git worktree add writes, leads to this
//     .git file. A call can write only inside what is mounted writable, so
//     it cannot forge this link in a directory it cannot reach: a planted
//     .git file naming /etc, or another repository's worktree, is refused;
//   - C may be a writable mount (not /, the home directory, a path in
//     /proc, /dev or /sys, nor one that holds a control socket).
//
// A .git file naming nothing, or a directory without commondir (a
// submodule's), mounts nothing, as before; a C that the user's mounts
// show already, or overlap, is left to them. Otherwise a failed rule
// refuses the session, saying which and how to mend it.

// linkWorktrees adds the common directory of every writable mount that is
// a linked worktree, as if the user had mounted it writable.
func (s *sealer) linkWorktrees() error {
	for _, w := range slices.Clone(s.user) {
		if w.ReadOnly {
			continue
		}
		c, err := s.worktreeCommon(w)
		if err != nil {
			return err
		}
		m := backend.Mount{Source: c, Target: c}
		if c != "" && !slices.Contains(s.user, m) {
			s.user = append(s.user, m)
			s.mounts = append(s.mounts, m)
		}
	}
	return nil
}

// worktreeCommon returns the common directory to mount for the writable
// mount w, "" for none, or why it refuses the one w's .git names.
func (s *sealer) worktreeCommon(w backend.Mount) (string, error) {
	file := filepath.Join(w.Source, ".git")
	if fi, err := os.Lstat(file); err != nil || !fi.Mode().IsRegular() {
		return "", nil
	}
	admin, err := gitFileTarget(file)
	if err != nil || admin == "" {
		return "", nil // git cannot use it either
	}
	link := filepath.Join(admin, "commondir")
	if _, err := os.Lstat(link); err != nil {
		return "", nil // not a linked worktree
	}
	common, err := resolveFrom(admin, readTrimmed(link))
	if err != nil || common == "" {
		return "", nil // names nothing: git fails on it
	}
	if s.overlaps(common) {
		return "", nil // the user's mounts decide
	}
	refuse := func(rule, found, fix string) error {
		return fmt.Errorf("workspace: %s is a linked worktree's .git file: it names %s, whose repository's git directory %s the sandbox would not otherwise see. sandbash mounts that directory (writable, its hooks and configuration read-only) only when %s; %s. %s; or mount %s yourself, readable or writable, to decide: %w",
			file, admin, common, rule, found, fix, common, ErrBadPath)
	}
	const (
		repair  = "If you moved the worktree or the repository, run `git worktree repair` in the worktree"
		planted = "If you did not write that .git file, a command may have: look at it and remove it"
	)
	if filepath.Dir(admin) != filepath.Join(common, "worktrees") {
		return "", refuse("the directory the .git file names lies in that repository's worktrees/, where git puts it", "it does not", planted)
	}
	for _, p := range []struct {
		name string
		dir  bool
	}{{"HEAD", false}, {"objects", true}, {"refs", true}} {
		fi, err := os.Lstat(filepath.Join(common, p.name))
		if err != nil || fi.IsDir() != p.dir || fi.Mode()&fs.ModeSymlink != 0 {
			return "", refuse("it holds a repository (HEAD, objects/ and refs/)", "it does not", planted)
		}
	}
	for _, d := range []string{common, admin} {
		uid, _, err := Owner(d)
		if err != nil {
			return "", fmt.Errorf("workspace: %s: %v: %w", d, err, ErrBadPath)
		}
		if uid != s.spec.UID {
			return "", refuse(fmt.Sprintf("it belongs to the workspace's owner (uid %d), as git requires", s.spec.UID),
				fmt.Sprintf("%s belongs to uid %d", d, uid), "Give it to the workspace's owner if it is theirs")
		}
	}
	back := filepath.Join(admin, "gitdir")
	fi, err := os.Lstat(back)
	if err != nil || !fi.Mode().IsRegular() {
		return "", refuse(back+", git's link back to the worktree, leads to "+file, "it is missing or no file", repair+". "+planted)
	}
	to, err := resolveFrom(admin, readTrimmed(back))
	if err != nil || to != file {
		return "", refuse(back+", git's link back to the worktree, leads to "+file, fmt.Sprintf("it leads to %s", readTrimmed(back)), repair+". "+planted)
	}
	if err := checkWritable(common, common); err != nil {
		return "", fmt.Errorf("workspace: the main repository of the linked worktree %s: %w", w.Target, err)
	}
	if err := checkTarget(common); err != nil {
		return "", fmt.Errorf("workspace: the main repository of the linked worktree %s: %w", w.Target, err)
	}
	if err := CheckSource(common); err != nil {
		return "", fmt.Errorf("workspace: the main repository of the linked worktree %s: %w", w.Target, err)
	}
	return common, nil
}

// overlaps reports whether host path p is what a user mount shows or
// holds, or lies above one, or is where a user mount appears.
func (s *sealer) overlaps(p string) bool {
	for _, m := range s.user {
		if within(p, m.Source) || within(m.Source, p) || within(p, m.Target) || within(m.Target, p) {
			return true
		}
	}
	return false
}
