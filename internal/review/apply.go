package review

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// How Apply writes the host workspace.
//
// Every operation is relative to a descriptor of the directory it happens
// in, opened beneath the workspace's root through no symlink and across no
// mount (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_XDEV): a
// symlink the session planted (say ./etc -> /etc, then a file under it),
// or one that appears on the host meanwhile, makes that change fail; it
// never leads a write out of the workspace. A file is written to a
// temporary name in its directory, flushed, given its mode and owner, and
// renamed over the old one: the host sees the old file or the new one,
// never half of it. A symlink is made under a temporary name and renamed
// the same way. Modes lose setuid and setgid.
//
// Owners: a file that replaces one keeps that file's owner; a new file or
// directory belongs to the workspace's owner (as root; otherwise to whoever
// runs Apply, who can give files no other owner).
//
// Conflicts: a host entry whose ctime is at or after the session opened
// (Create waits for the kernel's coarse clock to pass that time, so that
// whichever clock stamps a file, coarse or fine, a change after it sorts
// after it) changed since, and was not written by Apply itself: its change is
// refused, so that nobody's edit is overwritten or deleted. ctime is what
// no program can set back (unlike mtime: touch -d, tar, git checkout), and
// this costs nothing when the session opens, whatever the size of the
// workspace. It errs towards refusing: a file touched or rewritten with
// the same content counts as changed. Just before each write or removal
// the entry is checked again against what the diff saw.

// Refusal is a change Apply did not apply, and why.
type Refusal struct {
	Path, Reason string
}

// Result is what Apply did.
type Result struct {
	// Applied are the paths written to or removed from the host.
	Applied []string
	// Refused are the changes left in the session, with why.
	Refused []Refusal
}

// Apply writes the session's changes within paths (all without) into the
// host workspace, refusing what Changes marks as refused or in conflict,
// and takes what it applied out of the session's layers: it no longer
// shows in the diff, and the session sees the host's file there again.
func (l *Layer) Apply(paths ...string) (*Result, error) {
	cs, err := l.Changes(paths...)
	if err != nil {
		return nil, err
	}
	v, err := l.open()
	if err != nil {
		return nil, err
	}
	defer v.close()
	a := &applier{v: v, res: &Result{}, owner: [2]int{l.st.UID, l.st.GID}}
	if l.st.Applied == nil {
		l.st.Applied = map[string]stamp{}
	}
	var dels, writes, moved []*Change
	for i := range cs.List {
		c := &cs.List[i]
		switch {
		case c.Refused != "":
			a.refuse(c.Path, c.Refused)
		case c.Conflict != "":
			a.refuse(c.Path, c.Conflict+"; look at it, then reset the session's version (sandbash session reset) or copy it by hand")
		case c.Kind == Deleted:
			dels = append(dels, c)
		default:
			writes = append(writes, c)
			if c.Kind == Renamed {
				moved = append(moved, c)
			}
		}
	}
	// Deletions deepest first, so that a directory is empty when its
	// turn comes; then writes, parents first; then the old names of
	// renamed files, once their new names are written.
	slices.SortFunc(dels, func(x, y *Change) int { return compareStrings(y.Path, x.Path) })
	var forget []string
	for _, c := range dels {
		if a.remove(c.Path, c.Old) {
			forget = append(forget, c.Path)
		}
	}
	for _, c := range writes {
		if a.write(c) && c.New.Type != Dir {
			forget = append(forget, c.Path)
		}
	}
	for _, c := range moved {
		if a.done(c.Path) && a.remove(c.From, c.Old) {
			forget = append(forget, c.From)
		}
	}
	for p, s := range a.stamps {
		l.st.Applied[p] = s
	}
	// What was applied goes from the layers.
	var errs []error
	if len(forget) > 0 {
		if err := l.exclusive(); err != nil {
			errs = append(errs, err)
		} else {
			for _, p := range forget {
				if err := l.punch(p); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	errs = append(errs, l.saveAndCollect())
	return a.res, errors.Join(errs...)
}

type applier struct {
	v      *view
	res    *Result
	owner  [2]int
	stamps map[string]stamp
	ok     map[string]bool
}

func (a *applier) refuse(p, why string) {
	a.res.Refused = append(a.res.Refused, Refusal{Path: p, Reason: why})
}

func (a *applier) applied(p string, st *unix.Stat_t) {
	if a.stamps == nil {
		a.stamps, a.ok = map[string]stamp{}, map[string]bool{}
	}
	a.res.Applied = append(a.res.Applied, p)
	a.ok[p] = true
	if st != nil {
		a.stamps[p] = stampOf(st)
	}
}

func (a *applier) done(p string) bool { return a.ok[p] }

// parent opens the host directory that holds p, creating what is missing
// of it (as the session's layer has it).
func (a *applier) parent(p string, create bool) (int, string, error) {
	dir, base := splitRel(p)
	fd, err := openBeneath(a.v.host, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, base, err
	}
	fd, err = unix.Dup(a.v.host)
	if err != nil {
		return -1, "", err
	}
	done := ""
	for _, c := range strings.Split(dir, "/") {
		done = join(done, c)
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = a.mkdir(fd, c, done); err == nil {
				nfd, err = unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, "", err
		}
		fd = nfd
	}
	return fd, base, nil
}

// mkdir makes the host directory name (at p) in dirfd, with the mode the
// session's layer gives it, owned by the workspace's owner.
func (a *applier) mkdir(dirfd int, name, p string) error {
	mode := uint32(0o755)
	for _, root := range a.v.roots {
		fd, err := openBeneath(root, p, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			mode = st.Mode & 0o1777
		}
		unix.Close(fd)
		break
	}
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if os.Geteuid() == 0 {
		if err := unix.Fchown(fd, a.owner[0], a.owner[1]); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		a.applied(p, &st)
	}
	return nil
}

// unchanged checks, just before it is replaced or removed, that the host's
// name in dirfd is still what the diff saw (nothing, or the same file in
// the same state).
func unchanged(dirfd int, name string, was Entry) error {
	st, ok, err := lstatAt(dirfd, name)
	if err != nil {
		return err
	}
	switch {
	case !ok && was.Type == None:
		return nil
	case !ok:
		return errors.New("it was removed on the host meanwhile")
	case was.Type == None:
		return errors.New("it appeared on the host meanwhile")
	case st.Dev != was.st.Dev || st.Ino != was.st.Ino || (!isDir(&st) && st.Ctim != was.st.Ctim):
		return errors.New("it changed on the host meanwhile")
	}
	return nil
}

// remove removes the host's p, which must still be old.
func (a *applier) remove(p string, old Entry) bool {
	fd, name, err := a.parent(p, false)
	if errors.Is(err, unix.ENOENT) {
		a.applied(p, nil) // gone already, with its directory
		return true
	}
	if err != nil {
		a.refuse(p, "cannot reach it on the host: "+err.Error())
		return false
	}
	defer unix.Close(fd)
	if err := unchanged(fd, name, old); err != nil {
		a.refuse(p, err.Error())
		return false
	}
	flags := 0
	if old.Type == Dir {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(fd, name, flags); err != nil {
		if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			a.refuse(p, "the directory is not empty on the host: something in it was not applied, or appeared meanwhile")
		} else {
			a.refuse(p, "removing it failed: "+err.Error())
		}
		return false
	}
	a.applied(p, nil)
	return true
}

// write writes the session's side of c to the host.
func (a *applier) write(c *Change) bool {
	fd, name, err := a.parent(c.Path, true)
	if err != nil {
		a.refuse(c.Path, "cannot reach its directory on the host: "+err.Error())
		return false
	}
	defer unix.Close(fd)
	old := c.Old
	if c.Kind == Renamed {
		old = Entry{} // the old name is another path
	}
	if err := unchanged(fd, name, old); err != nil {
		a.refuse(c.Path, err.Error())
		return false
	}
	// What the new entry replaces, when a rename cannot: a directory
	// (emptied by the deletions before) or anything where a directory
	// goes.
	if old.Type == Dir && c.New.Type != Dir || old.Type != None && old.Type != Dir && c.New.Type == Dir {
		flags := 0
		if old.Type == Dir {
			flags = unix.AT_REMOVEDIR
		}
		if err := unix.Unlinkat(fd, name, flags); err != nil {
			a.refuse(c.Path, "removing what it replaces on the host failed: "+err.Error())
			return false
		}
	}
	switch c.New.Type {
	case Dir:
		if old.Type == Dir {
			err = a.chmodDir(fd, name, c.New.Mode)
		} else {
			err = a.mkdir(fd, name, c.Path)
		}
		if err == nil {
			return true // mkdir recorded it
		}
	case File:
		err = a.writeFile(fd, name, c)
	case Symlink:
		err = a.writeSymlink(fd, name, c)
	default:
		err = fmt.Errorf("a %s is never applied", c.New.Type)
	}
	if err != nil {
		a.refuse(c.Path, "writing it failed: "+err.Error())
		return false
	}
	st, ok, _ := lstatAt(fd, name)
	if ok {
		a.applied(c.Path, &st)
	} else {
		a.applied(c.Path, nil)
	}
	return true
}

func (a *applier) chmodDir(dirfd int, name string, mode uint32) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode&0o1777)
}

// owner is who the new entry belongs to: the one it replaces, or the
// workspace's owner.
func (a *applier) ownerOf(c *Change) (int, int) {
	if c.Kind != Renamed && c.Old.Type != None {
		return int(c.Old.st.Uid), int(c.Old.st.Gid)
	}
	return a.owner[0], a.owner[1]
}

func tempName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return ".sandbash-apply-" + hex.EncodeToString(b)
}

func (a *applier) writeFile(dirfd int, name string, c *Change) error {
	src, err := openBeneath(a.v.roots[c.layer], c.Path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return fmt.Errorf("reading the session's file: %w", err)
	}
	in := os.NewFile(uintptr(src), c.Path)
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return errors.New("the session's file is not a regular file any more")
	}
	tmp := tempName()
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	out := os.NewFile(uintptr(fd), tmp)
	ok := false
	defer func() {
		out.Close()
		if !ok {
			_ = unix.Unlinkat(dirfd, tmp, 0)
		}
	}()
	if _, err := out.ReadFrom(in); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		uid, gid := a.ownerOf(c)
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, c.New.Mode&0o777); err != nil {
		return err
	}
	if err := unix.Fsync(fd); err != nil {
		return err
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		return err
	}
	ok = true
	return nil
}

func (a *applier) writeSymlink(dirfd int, name string, c *Change) error {
	tmp := tempName()
	if err := unix.Symlinkat(c.New.Target, dirfd, tmp); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		uid, gid := a.ownerOf(c)
		if err := unix.Fchownat(dirfd, tmp, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			_ = unix.Unlinkat(dirfd, tmp, 0)
			return err
		}
	}
	if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return err
	}
	return nil
}
