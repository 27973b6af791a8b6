package review

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Type is the type of a file.
type Type int

// File types. Special files (FIFOs, sockets, devices) are listed, never
// applied.
const (
	None Type = iota
	Dir
	File
	Symlink
	Special
)

func (t Type) String() string {
	return [...]string{"nothing", "directory", "file", "symlink", "special file"}[t]
}

// Entry is one side of a change: what the host has, or what the session
// has.
type Entry struct {
	Type Type
	// Mode is the permission bits.
	Mode uint32
	Size int64
	// Target is a symlink's target.
	Target string
	st     unix.Stat_t
}

func entryOf(st *unix.Stat_t) Entry {
	e := Entry{Mode: st.Mode & 0o7777, Size: st.Size, st: *st}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = Dir
	case unix.S_IFREG:
		e.Type = File
	case unix.S_IFLNK:
		e.Type = Symlink
	default:
		e.Type = Special
	}
	return e
}

// Kind is what happened to a path.
type Kind byte

// Kinds of change, as git's --name-status letters.
const (
	Added       Kind = 'A'
	Modified    Kind = 'M'
	Deleted     Kind = 'D'
	Renamed     Kind = 'R'
	TypeChanged Kind = 'T'
)

// Change is one path the session changed.
type Change struct {
	// Path is relative to the workspace, with slashes; for Renamed it is
	// the new path and From the old one.
	Path, From string
	Kind       Kind
	// Old is what the host has (Type None when Added); New what the
	// session has (Type None when Deleted).
	Old, New Entry
	// Binary: a file whose content is not shown as text (a NUL byte in
	// its first 8000 bytes, as git decides, or over 64 MiB).
	Binary bool
	// Insertions and Deletions count the lines of a text change.
	Insertions, Deletions int
	// Refused says why Apply will not apply it ("" when it will).
	Refused string
	// Conflict says how the host's file changed since the session opened
	// ("" when it did not): Apply refuses it.
	Conflict string

	layer int // the layer holding New, or -1
	lines bool
}

// Changes are what a session changed in its workspace, sorted by path.
type Changes struct {
	Host string
	List []Change
	l    *Layer
}

// view is one read of the layers and the host.
type view struct {
	l     *Layer
	host  int   // the host workspace's root, for reading
	roots []int // the layers' roots, top first: upper, then the stack
	git   map[string]bool
}

func (l *Layer) open() (*view, error) {
	v := &view{l: l, host: -1, git: map[string]bool{}}
	var err error
	if v.host, err = openRoot(l.st.Host); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(v.host, &st); err != nil {
		v.close()
		return nil, err
	}
	if uint64(st.Dev) != l.st.Dev || uint64(st.Ino) != l.st.Ino {
		v.close()
		return nil, fmt.Errorf("review: %s is not the directory the session opened on (it was replaced or moved); nothing can be applied to it: %w", l.st.Host, ErrHostMoved)
	}
	for _, d := range append([]string{l.Upper()}, l.Stack()...) {
		fd, err := openRoot(d)
		if err != nil {
			v.close()
			return nil, err
		}
		v.roots = append(v.roots, fd)
	}
	return v, nil
}

func (v *view) close() {
	if v.host >= 0 {
		unix.Close(v.host)
	}
	for _, fd := range v.roots {
		unix.Close(fd)
	}
}

// Changes computes what the session changed. It walks the session's
// layers, not the workspace: the host is looked at only where a layer has
// an entry (and listed only under a directory a layer replaced whole).
// With paths, only changes within them (or, for a rename, from them).
func (l *Layer) Changes(paths ...string) (*Changes, error) {
	v, err := l.open()
	if err != nil {
		return nil, err
	}
	defer v.close()
	w := &walker{v: v}
	root := slices.Clone(v.roots)
	hroot, err := unix.Dup(v.host)
	if err != nil {
		return nil, err
	}
	// The roots are closed by v.close; walkDir closes what it is given,
	// so give it copies.
	for i := range root {
		if root[i], err = unix.Dup(root[i]); err != nil {
			return nil, err
		}
	}
	if err := w.walkDir("", root, hroot, true); err != nil {
		return nil, err
	}
	w.pairRenames()
	cs := &Changes{Host: l.st.Host, l: l}
	clean, err := cleanPaths(paths)
	if err != nil {
		return nil, err
	}
	for _, c := range w.out {
		if selected(c, clean) {
			cs.List = append(cs.List, c)
		}
	}
	for i := range cs.List {
		c := &cs.List[i]
		c.Refused = v.refusal(c)
		c.Conflict = v.conflict(c)
		if err := v.text(c); err != nil {
			return nil, fmt.Errorf("review: %s: %w", c.Path, err)
		}
	}
	slices.SortFunc(cs.List, func(a, b Change) int { return compareStrings(a.Path, b.Path) })
	return cs, nil
}

// cleanPaths turns PATH arguments (relative to the workspace, or absolute
// inside it) into clean slash paths.
func cleanPaths(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		c := strings.Trim(p, "/")
		for strings.Contains(c, "//") {
			c = strings.ReplaceAll(c, "//", "/")
		}
		if c == "." {
			c = ""
		}
		for _, part := range strings.Split(c, "/") {
			if part == ".." || part == "." {
				return nil, fmt.Errorf("review: path %q: give it relative to the workspace, without . or .. components", p)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func selected(c Change, paths []string) bool {
	if len(paths) == 0 {
		return true
	}
	for _, p := range paths {
		if within(c.Path, p) || c.Kind == Renamed && within(c.From, p) {
			return true
		}
	}
	return false
}

type walker struct {
	v   *view
	out []Change
}

type layerEnt struct {
	i  int
	st unix.Stat_t
}

// walkDir walks the directory rel of the merged view. fds are the layers'
// descriptors of it (-1 where a layer has none, or where it does not merge
// into the view), hfd the host's (-1 if the host has no directory there),
// and merges says whether the host's directory shows through. It closes
// the descriptors it is given.
func (w *walker) walkDir(rel string, fds []int, hfd int, merges bool) error {
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if hfd >= 0 {
			unix.Close(hfd)
		}
	}()
	seen := map[string][]layerEnt{}
	var order []string
	for i, fd := range fds {
		if fd < 0 {
			continue
		}
		ns, err := names(fd)
		if err != nil {
			return fmt.Errorf("review: reading the session's layer at %q: %w", rel, err)
		}
		for _, n := range ns {
			st, ok, err := lstatAt(fd, n)
			if err != nil {
				return fmt.Errorf("review: %s: %w", join(rel, n), err)
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
	slices.Sort(order)
	for _, n := range order {
		if err := w.entry(rel, n, seen[n], fds, hfd, merges); err != nil {
			return err
		}
	}
	if !merges && hfd >= 0 {
		// The session replaced this directory whole: what the host has
		// here that the session does not is deleted.
		hn, err := names(hfd)
		if err != nil {
			return fmt.Errorf("review: reading the workspace at %q: %w", rel, err)
		}
		slices.Sort(hn)
		for _, n := range hn {
			if _, ok := seen[n]; ok {
				continue
			}
			st, ok, err := lstatAt(hfd, n)
			if err != nil {
				return err
			}
			if ok {
				if err := w.deleted(join(rel, n), hfd, n, &st); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// entry decides what the session did to rel/name: ents are its entries in
// the layers that merge at rel, top first.
func (w *walker) entry(rel, name string, ents []layerEnt, fds []int, hfd int, merges bool) error {
	p := join(rel, name)
	top := ents[0]
	var hst unix.Stat_t
	hok := false
	if hfd >= 0 {
		var err error
		if hst, hok, err = lstatAt(hfd, name); err != nil {
			return fmt.Errorf("review: %s in the workspace: %w", p, err)
		}
	}
	switch {
	case isWhiteout(&top.st):
		if hok {
			return w.deleted(p, hfd, name, &hst)
		}
		return nil
	case isDir(&top.st):
		child := make([]int, len(fds))
		for i := range child {
			child[i] = -1
		}
		var err error
		if child[top.i], err = openSub(fds[top.i], name); err != nil {
			return fmt.Errorf("review: %s in the session's layer: %w", p, err)
		}
		stop := opaque(fds[top.i], name)
		for _, e := range ents[1:] {
			if stop {
				break
			}
			if !isDir(&e.st) {
				stop = true // a whiteout or a file below ends the merge
				break
			}
			if child[e.i], err = openSub(fds[e.i], name); err != nil {
				closeAll(child)
				return fmt.Errorf("review: %s in the session's layer: %w", p, err)
			}
			stop = opaque(fds[e.i], name)
		}
		nw := entryOf(&top.st)
		switch {
		case !hok:
			w.add(Change{Path: p, Kind: Added, New: nw, layer: top.i})
			return w.walkDir(p, child, -1, false)
		case !isDir(&hst):
			w.add(Change{Path: p, Kind: TypeChanged, Old: entryOf(&hst), New: nw, layer: top.i})
			return w.walkDir(p, child, -1, false)
		}
		if hst.Mode&0o7777 != nw.Mode {
			w.add(Change{Path: p, Kind: Modified, Old: entryOf(&hst), New: nw, layer: top.i})
		}
		chfd, err := openSub(hfd, name)
		if err != nil {
			closeAll(child)
			return fmt.Errorf("review: %s in the workspace: %w", p, err)
		}
		return w.walkDir(p, child, chfd, merges && !stop)
	}
	nw := entryOf(&top.st)
	if nw.Type == Symlink {
		t, err := readlinkAt(fds[top.i], name)
		if err != nil {
			return fmt.Errorf("review: %s in the session's layer: %w", p, err)
		}
		nw.Target = t
	}
	if !hok {
		w.add(Change{Path: p, Kind: Added, New: nw, layer: top.i})
		return nil
	}
	old := entryOf(&hst)
	if old.Type == Dir {
		// Replaced a directory: its content is deleted first.
		sub, err := openSub(hfd, name)
		if err != nil {
			return fmt.Errorf("review: %s in the workspace: %w", p, err)
		}
		err = w.deleteContent(p, sub)
		unix.Close(sub)
		if err != nil {
			return err
		}
		w.add(Change{Path: p, Kind: TypeChanged, Old: old, New: nw, layer: top.i})
		return nil
	}
	if old.Type != nw.Type {
		if old.Type == Symlink {
			old.Target, _ = readlinkAt(hfd, name)
		}
		w.add(Change{Path: p, Kind: TypeChanged, Old: old, New: nw, layer: top.i})
		return nil
	}
	same := old.Mode == nw.Mode
	switch old.Type {
	case Symlink:
		t, err := readlinkAt(hfd, name)
		if err != nil {
			return fmt.Errorf("review: %s in the workspace: %w", p, err)
		}
		old.Target = t
		same = t == nw.Target
	case File:
		if same {
			eq, err := sameContent(fds[top.i], name, hfd, name, old.Size, nw.Size)
			if err != nil {
				return fmt.Errorf("review: comparing %s: %w", p, err)
			}
			same = eq
		}
	case Special:
		same = same && hst.Rdev == top.st.Rdev
	}
	if !same {
		w.add(Change{Path: p, Kind: Modified, Old: old, New: nw, layer: top.i})
	}
	return nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

func (w *walker) add(c Change) { w.out = append(w.out, c) }

// deleted records that the host's rel (name in hfd) is deleted, with
// everything in it.
func (w *walker) deleted(p string, hfd int, name string, st *unix.Stat_t) error {
	e := entryOf(st)
	if e.Type == Dir {
		sub, err := openSub(hfd, name)
		if err != nil {
			return fmt.Errorf("review: %s in the workspace: %w", p, err)
		}
		err = w.deleteContent(p, sub)
		unix.Close(sub)
		if err != nil {
			return err
		}
	} else if e.Type == Symlink {
		e.Target, _ = readlinkAt(hfd, name)
	}
	w.add(Change{Path: p, Kind: Deleted, Old: e, layer: -1})
	return nil
}

// deleteContent records the deletion of everything in the host directory
// dirfd (at p).
func (w *walker) deleteContent(p string, dirfd int) error {
	ns, err := names(dirfd)
	if err != nil {
		return fmt.Errorf("review: reading the workspace at %q: %w", p, err)
	}
	slices.Sort(ns)
	for _, n := range ns {
		st, ok, err := lstatAt(dirfd, n)
		if err != nil {
			return err
		}
		if ok {
			if err := w.deleted(join(p, n), dirfd, n, &st); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameContent compares two regular files, each name in its directory.
func sameContent(afd int, aname string, bfd int, bname string, asize, bsize int64) (bool, error) {
	if asize != bsize {
		return false, nil
	}
	a, err := openFileAt(afd, aname)
	if err != nil {
		return false, err
	}
	defer a.Close()
	b, err := openFileAt(bfd, bname)
	if err != nil {
		return false, err
	}
	defer b.Close()
	return sameReaders(a, b)
}

func sameReaders(a, b io.Reader) (bool, error) {
	ab, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, ab)
		nb, eb := io.ReadFull(b, bb)
		if !bytes.Equal(ab[:na], bb[:nb]) {
			return false, nil
		}
		aEnd := errors.Is(ea, io.EOF) || errors.Is(ea, io.ErrUnexpectedEOF)
		bEnd := errors.Is(eb, io.EOF) || errors.Is(eb, io.ErrUnexpectedEOF)
		switch {
		case ea != nil && !aEnd:
			return false, ea
		case eb != nil && !bEnd:
			return false, eb
		case aEnd || bEnd:
			return aEnd == bEnd, nil
		}
	}
}

// openFileAt opens the regular file name in dirfd, following no symlink
// and never blocking on a FIFO.
func openFileAt(dirfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", name)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// pairRenames turns a deleted file and an added one with the same mode
// and content into a rename (what overlayfs makes of `mv`: a copy and a
// whiteout). Empty files are left alone: any two would match.
func (w *walker) pairRenames() {
	bySize := map[int64][]int{}
	for i, c := range w.out {
		if c.Kind == Deleted && c.Old.Type == File && c.Old.Size > 0 {
			bySize[c.Old.Size] = append(bySize[c.Old.Size], i)
		}
	}
	if len(bySize) == 0 {
		return
	}
	gone := map[int]bool{}
	for i := range w.out {
		c := &w.out[i]
		if c.Kind != Added || c.New.Type != File {
			continue
		}
		for _, j := range bySize[c.New.Size] {
			d := w.out[j]
			if gone[j] || d.Old.Mode != c.New.Mode || !w.sameAcross(c, &d) {
				continue
			}
			gone[j] = true
			c.Kind, c.From, c.Old = Renamed, d.Path, d.Old
			break
		}
	}
	out := w.out[:0]
	for i, c := range w.out {
		if !gone[i] {
			out = append(out, c)
		}
	}
	w.out = out
}

// sameAcross compares an added file of the session with a deleted file
// of the host.
func (w *walker) sameAcross(added, deleted *Change) bool {
	a, err := readAt(w.v.roots[added.layer], added.Path)
	if err != nil {
		return false
	}
	b, err := readAt(w.v.host, deleted.Path)
	return err == nil && bytes.Equal(a, b)
}

// conflict says how the host's side of c changed since the session
// opened, or "".
func (v *view) conflict(c *Change) string {
	var paths []string
	switch c.Kind {
	case Added:
		return ""
	case Renamed:
		paths = []string{c.From}
	default:
		if c.Old.Type == Dir && c.Kind == Modified {
			return "" // a directory's mode: its ctime moves with its content
		}
		paths = []string{c.Path}
	}
	for _, p := range paths {
		st, ok, err := v.hostStat(p)
		if err != nil {
			return "cannot be checked on the host (" + err.Error() + ")"
		}
		if ok && v.changedSinceOpen(p, &st) {
			return fmt.Sprintf("%s changed on the host at %s, after the session opened", p, time.Unix(0, st.Ctim.Nano()).Format(time.RFC3339))
		}
	}
	return ""
}

// changedSinceOpen: the host's p changed after the session opened, and not
// by Apply. A directory counts by its content, which is checked entry by
// entry.
func (v *view) changedSinceOpen(p string, st *unix.Stat_t) bool {
	if isDir(st) {
		return false
	}
	if st.Ctim.Nano() < v.l.st.Opened {
		return false
	}
	return v.l.st.Applied[p] != stampOf(st)
}

// hostStat stats p in the host workspace, resolved beneath it through no
// symlink.
func (v *view) hostStat(p string) (unix.Stat_t, bool, error) {
	dir, base := splitRel(p)
	fd, err := openBeneath(v.host, dir, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return unix.Stat_t{}, false, nil
	}
	if err != nil {
		return unix.Stat_t{}, false, err
	}
	defer unix.Close(fd)
	return lstatAt(fd, base)
}
