// Package hostmount stages a session's bind-mount sources as mounts of its
// own, under a root-only directory, so that a sandbox never runs as host
// root and never re-resolves a path a call could have changed.
//
// When sandbash runs as root and the workspace belongs to root, the calls
// run as an unprivileged uid ([backend.SandboxUID]) and see the workspace
// (and every other bind source) through an idmapped mount: files owned by
// root on disk appear owned by the sandbox uid inside, and what the call
// creates is stored as root on disk, so the workspace keeps its owner while
// no process of the call ever holds host uid 0. Each staged mount is cloned
// (open_tree) from the path the session checked when it opened, so later
// calls and containers bind the staged mount, not the path: a call that
// swaps a directory for a symlink changes nothing that is mounted later.
// Staged mounts are nosuid and nodev.
//
// They live in /run/sandbash/<session>/ on the host (a tmpfs, so a reboot
// clears them); Close detaches them, and Sweep removes those of sandbash
// processes that died.
package hostmount

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/internal/owner"
)

// Root is where sessions stage their mounts.
const Root = "/run/sandbash"

// ErrNoIdmap is wrapped by Add's error when the filesystem of a path, or
// one mounted below it, cannot be idmapped.
var ErrNoIdmap = errors.New("the filesystem, or one mounted below it, does not support idmapped mounts")

// IDMap maps root on disk to an unprivileged uid and gid: through the mount,
// uid 0 on disk is uid UID and the other way round, every other uid is
// itself; likewise for GID. A zero UID or GID leaves that kind of id as it
// is.
type IDMap struct{ UID, GID int }

// Stage is one session's staged mounts.
type Stage struct {
	dir    string
	userns int // user namespace fd for the idmapping, or -1
	n      int
	mounts []string
}

// New creates the session's staging directory, which only root and the
// group gid (the group the calls run as: bwrap reaches the staged mounts by
// path as the calls' user) may enter: the staged mounts must not lead other
// users around the directories that close them on the host. It is marked
// as this process's (package internal/owner) for Sweep; gone reports
// whether the owner of a directory left by an earlier process of the same
// session is dead. With idmap non-nil, Add maps ids.
func New(session string, gid int, gone func(string) bool, idmap *IDMap) (*Stage, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("hostmount: staging mounts needs root")
	}
	if err := os.MkdirAll(Root, 0o711); err != nil {
		return nil, fmt.Errorf("hostmount: creating %s: %w", Root, err)
	}
	dir := filepath.Join(Root, session)
	err := os.Mkdir(dir, 0o711)
	if errors.Is(err, os.ErrExist) {
		// A kept session reopened after its last sandbash died.
		if prev, rerr := owner.Of(dir); rerr == nil && gone != nil && gone(prev) {
			if err = remove(dir); err == nil {
				err = os.Mkdir(dir, 0o711)
			}
		} else {
			return nil, fmt.Errorf("hostmount: session %s is open in another sandbash process (%s exists); close that one first: %w", session, dir, err)
		}
	}
	if err == nil {
		err = os.Chown(dir, 0, gid)
	}
	if err == nil {
		err = os.Chmod(dir, 0o710)
	}
	if err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("hostmount: creating %s: %w", dir, err)
	}
	s := &Stage{dir: dir, userns: -1}
	if err := owner.Mark(dir); err != nil {
		s.Close()
		return nil, fmt.Errorf("hostmount: %w", err)
	}
	if idmap != nil {
		fd, err := sharedUserns(*idmap)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.userns = fd
	}
	return s, nil
}

// Dir is the staging directory.
func (s *Stage) Dir() string { return s.dir }

// Add clones the mounts at and below src (a directory or file, symlinks
// already resolved) and attaches the clone under the staging directory,
// nosuid, nodev, read-only if asked, and idmapped if asked and the stage
// maps ids.
// It returns the staged path: bind that instead of src. A symlink anywhere
// on src is refused, so a path checked symlink-free cannot be turned
// elsewhere between the check and the clone.
func (s *Stage) Add(src string, readOnly, mapIDs bool) (string, error) {
	pfd, err := unix.Openat2(unix.AT_FDCWD, src, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ELOOP) {
		return "", fmt.Errorf("hostmount: %s now leads through a symlink; it changed after it was checked (a command may be changing it): open the session again", src)
	} else if err != nil {
		return "", fmt.Errorf("hostmount: opening %s: %w", src, err)
	}
	// The whole tree, as the host sees it: without its submounts a call
	// would see what they cover on the host.
	fd, err := unix.OpenTree(pfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
	unix.Close(pfd)
	if err != nil {
		return "", fmt.Errorf("hostmount: cloning the mount of %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	mapIDs = mapIDs && s.userns >= 0
	if mapIDs {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(s.userns)
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, attr); err != nil {
		if mapIDs && errors.Is(err, unix.EINVAL) {
			return "", fmt.Errorf("hostmount: making an idmapped mount of %s: %w (%w)", src, err, ErrNoIdmap)
		}
		return "", fmt.Errorf("hostmount: setting nosuid on %s: %w", src, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("hostmount: %w", err)
	}
	dst := filepath.Join(s.dir, "m"+strconv.Itoa(s.n))
	s.n++
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(dst, 0o700)
	} else {
		err = os.WriteFile(dst, nil, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("hostmount: %w", err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		os.Remove(dst)
		return "", fmt.Errorf("hostmount: attaching the staged mount of %s: %w", src, err)
	}
	s.mounts = append(s.mounts, dst)
	if mapIDs && !readOnly {
		if p, err := privileged(dst); err != nil {
			return "", fmt.Errorf("hostmount: looking for setuid files in %s: %w", src, err)
		} else if p != "" {
			return "", fmt.Errorf("hostmount: %s is a setuid or setgid executable, or one with file capabilities; a call in this root-owned tree could rewrite it through a shared memory mapping (which keeps those bits) and hand root to whoever runs it next. Remove the bits (chmod u-s,g-s FILE; setcap -r FILE), or chown the tree to a normal user: %w",
				filepath.Join(src, strings.TrimPrefix(p, dst)), ErrPrivileged)
		}
	}
	return dst, nil
}

// ErrPrivileged: a root-owned tree to be idmapped holds a setuid, setgid or
// file-capability executable that a call could rewrite.
var ErrPrivileged = errors.New("privileged executable in a mapped tree")

// privileged walks a staged tree (no symlink followed) and returns the
// first executable that would run with privileges: setuid or setgid with an
// execute bit, or with file capabilities. Through the idmap a call owns
// root's files, and a write through a shared mapping, unlike write(2),
// keeps those bits; the seccomp filter keeps calls from setting them.
func privileged(root string) (string, error) {
	found := ""
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		if m&0o111 == 0 {
			return nil
		}
		if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			found = p
			return fs.SkipAll
		}
		if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil && n > 0 {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	return found, err
}

// Close detaches every staged mount and removes the staging directory. It
// is idempotent.
func (s *Stage) Close() error {
	if s.userns >= 0 {
		unix.Close(s.userns)
		s.userns = -1
	}
	if s.dir == "" {
		return nil
	}
	err := s.detach()
	if err != nil {
		err = remove(s.dir)
	}
	s.dir, s.mounts = "", nil
	return err
}

// detach unmounts the mounts Add staged, side by side (each with what is
// mounted below it), and removes their mount points, the mark and the
// staging directory, none of them recursively: it needs no look at the
// mount table (a read of all of it). Anything it does not know of (a
// mount it did not make, stacked on one it did or elsewhere in the
// directory; an entry it did not create) makes a removal fail, and Close
// falls back to remove, which reads the mount table and detaches
// everything below the directory first.
func (s *Stage) detach() error {
	errs := make([]error, len(s.mounts))
	var wg sync.WaitGroup
	for i, m := range s.mounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// NOFOLLOW: what is mounted there must not lead elsewhere.
			if err := unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs[i] = err
				return
			}
			if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, owner.File)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.Remove(s.dir)
}

// remove detaches every mount below dir and removes it. Its entries (the
// staged mounts, .owner) go side by side: each is unmounted with what is
// mounted below it, deepest first, then removed. Every unmount waits for
// an RCU grace period after it let go of the mount table, and removing a
// directory can wait for the disk (see internal/rmtree): those waits
// overlap. Nothing is removed below a mount that could not be detached.
func remove(dir string) error {
	byEntry := map[string][]string{} // deepest first, as mountsBelow lists them
	for _, m := range mountsBelow(dir) {
		entry, _, _ := strings.Cut(strings.TrimPrefix(m, dir+"/"), "/")
		byEntry[entry] = append(byEntry[entry], m)
	}
	names := slices.Collect(maps.Keys(byEntry))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, ok := byEntry[e.Name()]; !ok {
			names = append(names, e.Name())
		}
	}
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range byEntry[name] {
				// NOFOLLOW: what is mounted there must not lead elsewhere.
				if err := unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("hostmount: unmounting %s: %w", m, err))
					mu.Unlock()
					return
				}
			}
			_ = os.RemoveAll(filepath.Join(dir, name))
		}()
	}
	wg.Wait()
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("hostmount: %w", err))
		}
	}
	return errors.Join(errs...)
}

// mountsBelow lists the mount points strictly below dir, deepest first.
func mountsBelow(dir string) []string {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range mounts {
		if m.Mountpoint != dir {
			out = append(out, m.Mountpoint)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return out
}

// Sweep removes the staging directories whose owner gone reports dead,
// and returns what it removed.
func Sweep(gone func(owner string) bool) ([]string, error) {
	return owner.SweepDirs(Root, "", gone, remove)
}

// The user namespaces of the idmappings, one per mapping, made once per
// process: a namespace is only a mapping, and the descriptor that holds it
// never leaves this process (close-on-exec).
var namespaces struct {
	mu sync.Mutex
	m  map[IDMap]*namespace
}

type namespace struct {
	once sync.Once
	fd   int
	err  error
}

// Prepare starts making the user namespace for m in the background, so
// that New finds it ready: sandbash.Open calls it as soon as it knows the
// workspace belongs to root.
func Prepare(m IDMap) {
	go func() {
		if fd, err := sharedUserns(m); err == nil {
			unix.Close(fd)
		}
	}()
}

// sharedUserns returns a descriptor of its own (the caller closes it) for
// the user namespace of m, making it if this process has none yet. A
// failure is not kept: the next call tries again.
func sharedUserns(m IDMap) (int, error) {
	namespaces.mu.Lock()
	if namespaces.m == nil {
		namespaces.m = map[IDMap]*namespace{}
	}
	ns := namespaces.m[m]
	if ns == nil {
		ns = &namespace{fd: -1}
		namespaces.m[m] = ns
	}
	namespaces.mu.Unlock()
	ns.once.Do(func() { ns.fd, ns.err = userns(m) })
	if ns.err != nil {
		namespaces.mu.Lock()
		if namespaces.m[m] == ns {
			delete(namespaces.m, m)
		}
		namespaces.mu.Unlock()
		return -1, ns.err
	}
	fd, err := unix.FcntlInt(uintptr(ns.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("hostmount: %w", err)
	}
	return fd, nil
}

// userns returns a user namespace fd whose mapping makes root on disk m.UID
// (and m.GID) through an idmapped mount, and every other id below them
// itself. The namespace is made by a child process, held by it until the
// descriptor is open, then by the descriptor alone: the child is killed
// then, and reaped in the background (waiting for a shell to start up
// and exit cost half a millisecond of every Open).
func userns(m IDMap) (int, error) {
	cmd := exec.Command("/bin/sh", "-c", "read _")
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: idRanges(m.UID),
		GidMappings: idRanges(m.GID),
		Pdeathsig:   syscall.SIGKILL,
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("hostmount: creating a user namespace for the idmapping: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		in.Close()
		go func() { _ = cmd.Wait() }()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("hostmount: opening the idmapping's user namespace: %w", err)
	}
	return fd, nil
}

// idRanges swaps 0 and id and keeps every other id (0 keeps all). The swap,
// rather than a one-way map, lets overlayfs copy files up through an
// idmapped layer: it creates them as the mounter (root) before it sets
// their owner.
func idRanges(id int) []syscall.SysProcIDMap {
	const all = 1<<32 - 1 // ids 0 to 4294967294; -1 is never an id
	if id == 0 {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: all}}
	}
	return []syscall.SysProcIDMap{
		{ContainerID: 0, HostID: id, Size: 1},
		{ContainerID: 1, HostID: 1, Size: id - 1},
		{ContainerID: id, HostID: 0, Size: 1},
		{ContainerID: id + 1, HostID: id + 1, Size: all - id - 1},
	}
}
