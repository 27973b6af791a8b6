package review

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Checkpoint saves the session's layer as name (replacing a checkpoint of
// that name). The upper layer is frozen as it is (renamed: nothing is
// copied) and an empty one starts above it.
func (l *Layer) Checkpoint(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	empty, err := emptyDir(l.Upper())
	if err != nil {
		return err
	}
	if !empty {
		if err := l.freeze(); err != nil {
			return err
		}
	}
	if len(l.st.Stack) > MaxStack {
		if err := l.squash(); err != nil {
			return err
		}
	}
	l.st.Checkpoints[name] = checkpoint{Stack: slices.Clone(l.st.Stack), Created: time.Now().UTC()}
	return l.saveAndCollect()
}

// Restore brings the view back to checkpoint name: its frozen layers,
// under an empty upper layer. What the session changed since is
// discarded; other checkpoints stay.
func (l *Layer) Restore(name string) error {
	cp, ok := l.st.Checkpoints[name]
	if !ok {
		var have []string
		for _, c := range l.Checkpoints() {
			have = append(have, c.Name)
		}
		list := "none yet"
		if len(have) > 0 {
			list = strings.Join(have, ", ")
		}
		return fmt.Errorf("review: no checkpoint %q (checkpoints: %s): %w", name, list, ErrNoCheckpoint)
	}
	l.st.Stack = slices.Clone(cp.Stack)
	if err := l.clearUpper(); err != nil {
		return err
	}
	return l.saveAndCollect()
}

// Reset discards the session's changes within paths (all of them
// without), returning the paths reset. Checkpoints stay.
func (l *Layer) Reset(paths ...string) ([]string, error) {
	if len(paths) == 0 {
		cs, err := l.Changes()
		if err != nil {
			return nil, err
		}
		l.st.Stack = nil
		if err := l.clearUpper(); err != nil {
			return nil, err
		}
		return changedPaths(cs.List), l.saveAndCollect()
	}
	cs, err := l.Changes(paths...)
	if err != nil {
		return nil, err
	}
	if len(cs.List) == 0 {
		return nil, nil
	}
	if err := l.exclusive(); err != nil {
		return nil, err
	}
	var done []string
	for _, c := range cs.List {
		for _, p := range []string{c.From, c.Path} {
			if p == "" {
				continue
			}
			if err := l.punch(p); err != nil {
				return done, errors.Join(err, l.saveAndCollect())
			}
		}
		done = append(done, c.Path)
	}
	return done, l.saveAndCollect()
}

func changedPaths(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Path)
	}
	return out
}

// freeze turns the upper layer into the top frozen layer and starts an
// empty one with the same root.
func (l *Layer) freeze() error {
	var st unix.Stat_t
	if err := unix.Lstat(l.Upper(), &st); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	n := l.st.Next
	l.st.Next++
	if err := os.Rename(l.Upper(), l.layerDir(n)); err != nil {
		return fmt.Errorf("review: freezing the layer: %w", err)
	}
	l.st.Stack = append([]int{n}, l.st.Stack...)
	return l.newUpper(st.Mode&0o7777, int(st.Uid), int(st.Gid))
}

// clearUpper replaces the upper layer with an empty one whose root is the
// view's below it.
func (l *Layer) clearUpper() error {
	below := l.st.Host
	if len(l.st.Stack) > 0 {
		below = l.layerDir(l.st.Stack[0])
	}
	var st unix.Stat_t
	if err := unix.Stat(below, &st); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	old := filepath.Join(l.dir, "discarded")
	if err := removeAll(old); err != nil {
		return err
	}
	if err := os.Rename(l.Upper(), old); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if err := l.newUpper(st.Mode&0o7777, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return removeAll(old)
}

// saveAndCollect saves the state and removes the frozen layers neither
// the view nor a checkpoint uses.
func (l *Layer) saveAndCollect() error {
	if err := l.save(); err != nil {
		return err
	}
	used := map[int]bool{}
	for _, n := range l.st.Stack {
		used[n] = true
	}
	for _, c := range l.st.Checkpoints {
		for _, n := range c.Stack {
			used[n] = true
		}
	}
	entries, err := os.ReadDir(filepath.Join(l.dir, "layers"))
	if err != nil {
		return fmt.Errorf("review: %w", err)
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil || !used[n] {
			if err := removeAll(filepath.Join(l.dir, "layers", e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// exclusive makes the view's frozen layers its own: at most one, which no
// checkpoint uses, so that Apply and Reset can take paths out of it.
func (l *Layer) exclusive() error {
	switch len(l.st.Stack) {
	case 0:
		return nil
	case 1:
		shared := false
		for _, c := range l.st.Checkpoints {
			if slices.Contains(c.Stack, l.st.Stack[0]) {
				shared = true
			}
		}
		if !shared {
			return nil
		}
	}
	return l.squash()
}

// squash merges the frozen layers of the view into one new layer of hard
// links (nothing writes a frozen layer's files in place, so sharing them
// is safe), which becomes the view's only frozen layer.
func (l *Layer) squash() error {
	n := l.st.Next
	l.st.Next++
	dst := l.layerDir(n)
	if err := os.Mkdir(dst, 0o700); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	var root unix.Stat_t
	if err := unix.Lstat(l.layerDir(l.st.Stack[0]), &root); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	if err := setAttrs(dst, root.Mode&0o7777, int(root.Uid), int(root.Gid)); err != nil {
		return err
	}
	dfd, err := openRoot(dst)
	if err != nil {
		return err
	}
	var fds []int
	for _, s := range l.Stack() {
		fd, err := openRoot(s)
		if err != nil {
			closeAll(fds)
			unix.Close(dfd)
			return err
		}
		fds = append(fds, fd)
	}
	if err := merge(dfd, fds, ""); err != nil {
		return fmt.Errorf("review: squashing the session's layers: %w", err)
	}
	l.st.Stack = []int{n}
	return nil
}

// merge writes into the directory dst the merge of the layer directories
// fds (top first; -1 where a layer has none), as one layer: what the
// top-most has of each name, whiteouts kept, a directory opaque where the
// layers hid what is below. It closes the descriptors.
func merge(dst int, fds []int, rel string) error {
	defer unix.Close(dst)
	defer closeAll(fds)
	seen := map[string][]layerEnt{}
	var order []string
	for i, fd := range fds {
		if fd < 0 {
			continue
		}
		ns, err := names(fd)
		if err != nil {
			return err
		}
		for _, n := range ns {
			st, ok, err := lstatAt(fd, n)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if _, dup := seen[n]; !dup {
				order = append(order, n)
			}
			seen[n] = append(seen[n], layerEnt{i, st})
		}
	}
	for _, n := range order {
		ents := seen[n]
		top := ents[0]
		switch {
		case isWhiteout(&top.st):
			if err := whiteout(dst, n); err != nil {
				return err
			}
		case !isDir(&top.st):
			if err := linkOrCopy(fds[top.i], n, dst, n); err != nil {
				return fmt.Errorf("%s: %w", join(rel, n), err)
			}
		default:
			child := make([]int, len(fds))
			for i := range child {
				child[i] = -1
			}
			var err error
			if child[top.i], err = openSub(fds[top.i], n); err != nil {
				return err
			}
			stop := opaque(fds[top.i], n)
			for _, e := range ents[1:] {
				if stop {
					break
				}
				if !isDir(&e.st) {
					stop = true
					break
				}
				if child[e.i], err = openSub(fds[e.i], n); err != nil {
					closeAll(child)
					return err
				}
				stop = opaque(fds[e.i], n)
			}
			if err := unix.Mkdirat(dst, n, 0o700); err != nil {
				closeAll(child)
				return err
			}
			if err := setAttrsAt(dst, n, top.st.Mode&0o7777, int(top.st.Uid), int(top.st.Gid)); err != nil {
				closeAll(child)
				return err
			}
			if stop {
				if err := unix.Lsetxattr(fdPath(dst, n), opaqueXattr, []byte("y"), 0); err != nil {
					closeAll(child)
					return fmt.Errorf("marking %s opaque: %w", join(rel, n), err)
				}
			}
			sub, err := openSub(dst, n)
			if err != nil {
				closeAll(child)
				return err
			}
			if err := merge(sub, child, join(rel, n)); err != nil {
				return err
			}
		}
	}
	return nil
}

// whiteout makes name in dirfd a whiteout: a character device 0/0, which
// the kernel lets anyone create.
func whiteout(dirfd int, name string) error {
	return unix.Mknodat(dirfd, name, unix.S_IFCHR, 0)
}

// linkOrCopy hard-links name of sfd as name in dfd, or copies it where a
// link cannot be made (too many links).
func linkOrCopy(sfd int, sname string, dfd int, dname string) error {
	err := unix.Linkat(sfd, sname, dfd, dname, 0)
	if err == nil || !errors.Is(err, unix.EMLINK) {
		return err
	}
	st, _, err := lstatAt(sfd, sname)
	if err != nil {
		return err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		src, err := openFileAt(sfd, sname)
		if err != nil {
			return err
		}
		defer src.Close()
		fd, err := unix.Openat(dfd, dname, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		dst := os.NewFile(uintptr(fd), dname)
		defer dst.Close()
		if _, err := dst.ReadFrom(src); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		return unix.Fchmod(fd, st.Mode&0o777)
	case unix.S_IFCHR:
		if isWhiteout(&st) {
			return whiteout(dfd, dname)
		}
	}
	return err
}

func setAttrs(p string, mode uint32, uid, gid int) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, uid, gid); err != nil {
			return fmt.Errorf("review: %w", err)
		}
	}
	if err := unix.Chmod(p, mode); err != nil {
		return fmt.Errorf("review: %w", err)
	}
	return nil
}

func setAttrsAt(dirfd int, name string, mode uint32, uid, gid int) error {
	if os.Geteuid() == 0 {
		if err := unix.Fchownat(dirfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return unix.Fchmodat(dirfd, name, mode, 0)
}

// punch takes p out of every layer of the view (which exclusive made the
// view's own), so that the view shows the host's p: its entries go, and
// a directory above it that hid the host's (a whiteout, an opaque
// directory) keeps hiding everything but p, with whiteouts.
func (l *Layer) punch(p string) error {
	layers := append([]string{l.Upper()}, l.Stack()...)
	for i, d := range layers {
		if err := punchLayer(d, append(slices.Clone(layers[i+1:]), l.st.Host), p); err != nil {
			return fmt.Errorf("review: resetting %s: %w", p, err)
		}
	}
	return nil
}

// punchLayer takes p out of the layer at dir; below are the layers under
// it, host last.
func punchLayer(dir string, below []string, p string) error {
	fd, err := openRoot(dir)
	if err != nil {
		return err
	}
	comps := strings.Split(p, "/")
	for i, c := range comps {
		last := i == len(comps)-1
		st, ok, err := lstatAt(fd, c)
		if err != nil || !ok {
			unix.Close(fd)
			return err
		}
		if last {
			err := removeAt(fd, c, &st)
			unix.Close(fd)
			return err
		}
		rel := strings.Join(comps[:i+1], "/")
		switch {
		case isWhiteout(&st):
			// Everything below was deleted: a directory that deletes
			// everything but p.
			if err := unix.Unlinkat(fd, c, 0); err != nil {
				unix.Close(fd)
				return err
			}
			if err := unix.Mkdirat(fd, c, 0o700); err != nil {
				unix.Close(fd)
				return err
			}
			if err = copyAttrsBelow(fd, c, below, rel); err == nil {
				err = hideBelow(fd, c, below, rel, comps[i+1])
			}
		case isDir(&st) && opaque(fd, c):
			err = hideBelow(fd, c, below, rel, comps[i+1])
			if err == nil {
				err = unix.Lremovexattr(fdPath(fd, c), opaqueXattr)
			}
		case isDir(&st):
		default:
			err = fmt.Errorf("%s is a %s in the session's layer; reset or apply it as a whole", rel, entryOf(&st).Type)
		}
		if err != nil {
			unix.Close(fd)
			return err
		}
		sub, err := openSub(fd, c)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = sub
	}
	unix.Close(fd)
	return nil
}

// hideBelow puts a whiteout in the layer directory name (in dirfd) for
// every name the layers below (and the host) have at rel, but keep and
// what the directory has itself.
func hideBelow(dirfd int, name string, below []string, rel, keep string) error {
	sub, err := openSub(dirfd, name)
	if err != nil {
		return err
	}
	defer unix.Close(sub)
	own, err := names(sub)
	if err != nil {
		return err
	}
	hide := map[string]bool{}
	for _, b := range below {
		root, err := openRoot(b)
		if err != nil {
			return err
		}
		fd, err := openBeneath(root, rel, unix.O_RDONLY|unix.O_DIRECTORY)
		unix.Close(root)
		if err != nil {
			continue // nothing there, or not a directory
		}
		ns, err := names(fd)
		unix.Close(fd)
		if err != nil {
			return err
		}
		for _, n := range ns {
			hide[n] = true
		}
	}
	for n := range hide {
		if n == keep || slices.Contains(own, n) {
			continue
		}
		if err := whiteout(sub, n); err != nil {
			return err
		}
	}
	return nil
}

// copyAttrsBelow gives the new directory name (in dirfd) the mode and
// owner of the first directory the layers below (or the host) have at rel.
func copyAttrsBelow(dirfd int, name string, below []string, rel string) error {
	for _, b := range below {
		root, err := openRoot(b)
		if err != nil {
			return err
		}
		fd, err := openBeneath(root, rel, unix.O_PATH|unix.O_DIRECTORY)
		unix.Close(root)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		unix.Close(fd)
		if err != nil {
			return err
		}
		return setAttrsAt(dirfd, name, st.Mode&0o7777, int(st.Uid), int(st.Gid))
	}
	return nil
}

// removeAt removes name (whatever it is, a tree with all in it) from
// dirfd.
func removeAt(dirfd int, name string, st *unix.Stat_t) error {
	if !isDir(st) {
		return unix.Unlinkat(dirfd, name, 0)
	}
	sub, err := openSub(dirfd, name)
	if err != nil {
		return err
	}
	ns, err := names(sub)
	if err == nil {
		for _, n := range ns {
			cst, ok, e := lstatAt(sub, n)
			if e == nil && ok {
				e = removeAt(sub, n, &cst)
			}
			if e != nil {
				err = e
				break
			}
		}
	}
	unix.Close(sub)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

// removeAll removes p, a directory of the layer's, with all in it.
func removeAll(p string) error {
	parent, err := openRoot(filepath.Dir(p))
	if err != nil {
		return err
	}
	defer unix.Close(parent)
	st, ok, err := lstatAt(parent, filepath.Base(p))
	if err != nil || !ok {
		return err
	}
	if err := removeAt(parent, filepath.Base(p), &st); err != nil {
		return fmt.Errorf("review: removing %s: %w", p, err)
	}
	return nil
}

func emptyDir(p string) (bool, error) {
	fd, err := openRoot(p)
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	ns, err := names(fd)
	return len(ns) == 0, err
}
