package review

import (
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// What Apply never writes to the host, whatever the session did.
//
// Git runs code from its metadata: hooks, and commands its configuration
// names (core.fsmonitor, core.hooksPath, filters, the pager, aliases),
// selected by info/attributes; a .git file or commondir decides where that
// metadata is read from. In overlay mode a call may write all of it in its
// own layer (git in the sandbox runs there, which is the sandbox's
// business); but a hook planted there and applied would run on the host
// the next time the user commits. So inside a git directory (a .git, a
// submodule's or worktree's under .git/modules or .git/worktrees, a bare
// repository: anything that looks like one on the host or in the session's
// layers), Apply writes only git's data: objects (not objects/info, whose
// alternates lead elsewhere), refs, logs, the index, HEAD and the other
// *_HEAD files, packed-refs and COMMIT_EDITMSG, so that commits made in
// the sandbox can land. Everything else there (hooks/, config,
// config.worktree, info/, commondir, a rebase's todo list) is refused, as
// are symlinks anywhere in git's metadata, a .git that is a file or a
// symlink (it names the git directory), and the removal of a .git
// directory. Special files (FIFOs, sockets, devices) are never applied.

// gitData are the entries of a git directory that hold data, not code.
var gitData = []string{"objects", "refs", "logs"}

var gitFiles = []string{"HEAD", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "BISECT_HEAD", "AUTO_MERGE", "COMMIT_EDITMSG", "MERGE_MSG", "SQUASH_MSG", "index", "packed-refs", "shallow", "description"}

const gitReason = "git metadata other than objects, refs, logs and the index: apply never writes git's hooks or configuration, which git on the host would run"

// refusal says why Apply will not apply c, or "".
func (v *view) refusal(c *Change) string {
	if c.New.Type == Special {
		return "a " + specialName(c.New.st.Mode) + ": apply writes only files, directories and symlinks"
	}
	for _, p := range []string{c.From, c.Path} {
		if p == "" {
			continue
		}
		if r := v.gitRefusal(p, c); r != "" {
			return r
		}
	}
	return ""
}

func specialName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "unix socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return "special file"
}

func (v *view) gitRefusal(p string, c *Change) string {
	comps := strings.Split(p, "/")
	// The innermost git directory p lies strictly inside.
	k := -1
	for i := 0; i < len(comps); i++ {
		if v.gitDir(strings.Join(comps[:i], "/")) {
			k = i
		}
	}
	last := comps[len(comps)-1]
	if strings.EqualFold(last, ".git") {
		switch {
		case c.Old.Type != None && c.Old.Type != Dir, c.New.Type != None && c.New.Type != Dir:
			return "a .git file or symlink names the directory git takes its configuration and hooks from: " + gitReason
		case c.Kind == Deleted || c.Kind == TypeChanged || c.Kind == Renamed && c.From == p:
			return "removing a repository's .git directory: " + gitReason
		}
	}
	if k < 0 {
		return ""
	}
	if c.Old.Type == Symlink || c.New.Type == Symlink {
		return "a symlink in git's metadata: " + gitReason
	}
	r := comps[k:]
	switch {
	case slices.Contains(gitData, r[0]) && !(r[0] == "objects" && len(r) > 1 && r[1] == "info"):
		return ""
	case len(r) == 1 && slices.Contains(gitFiles, r[0]) && c.New.Type != Dir && c.Old.Type != Dir:
		return ""
	case c.Kind == Added && c.New.Type == Dir:
		return "" // an empty directory: harmless, and needed above what is applied
	}
	return gitReason
}

// gitDir reports whether the directory rel looks like a git directory, on
// the host or in any layer: it is named .git, or it holds HEAD and objects/
// or commondir (as git decides).
func (v *view) gitDir(rel string) bool {
	if g, ok := v.git[rel]; ok {
		return g
	}
	_, base := splitRel(rel)
	g := strings.EqualFold(base, ".git")
	for _, root := range append([]int{v.host}, v.roots...) {
		if g {
			break
		}
		fd, err := openBeneath(root, rel, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			continue
		}
		_, head, _ := lstatAt(fd, "HEAD")
		ost, objects, _ := lstatAt(fd, "objects")
		_, common, _ := lstatAt(fd, "commondir")
		g = head && (objects && isDir(&ost) || common)
		unix.Close(fd)
	}
	v.git[rel] = g
	return g
}
