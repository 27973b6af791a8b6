package review

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every path below a layer's or the host workspace's root is resolved
// beneath it, through no symlink and across no mount: a symlink a call
// planted in its layer, or one that appears on the host meanwhile, can
// neither lead a read nor a write anywhere else.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// opaqueXattr marks a directory of a layer that replaces the one below it
// whole (overlayfs mounted with userxattr).
const opaqueXattr = "user.overlay.opaque"

// openHost opens the host workspace's root, through no symlink.
func openHost(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("review: opening the workspace %s: %w", p, err)
	}
	return fd, nil
}

// openRoot opens a layer's (or the host's) root directory for reading.
func openRoot(p string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("review: opening %s: %w", p, err)
	}
	return fd, nil
}

// openBeneath opens rel ("" for dirfd itself) beneath dirfd.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneath})
}

// openSub opens the directory name in dirfd (one component) for reading.
func openSub(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// names lists a directory opened for reading.
func names(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return nil, err
	}
	buf := make([]byte, 32<<10)
	var out []string
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		_, _, out = unix.ParseDirent(buf[:n], -1, out)
	}
}

// lstatAt stats name in dirfd without following it; ok is false when
// there is nothing there.
func lstatAt(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return st, false, nil
	}
	return st, err == nil, err
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func isDir(st *unix.Stat_t) bool { return st.Mode&unix.S_IFMT == unix.S_IFDIR }

// fdPath names the entry name in the directory dirfd through /proc,
// without resolving anything but the descriptor.
func fdPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// opaque reports whether the directory name in dirfd is opaque.
func opaque(dirfd int, name string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(fdPath(dirfd, name), opaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// maxRead bounds what is read of one file to compare or show it.
const maxRead = 64 << 20

// errTooLarge: a file over maxRead.
var errTooLarge = errors.New("too large to read")

// readAt reads the regular file at rel beneath dirfd.
func readAt(dirfd int, rel string) ([]byte, error) {
	fd, err := openBeneath(dirfd, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is no longer a regular file", rel)
	}
	if st.Size > maxRead {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, maxRead+1))
	if err == nil && len(b) > maxRead {
		err = errTooLarge
	}
	return b, err
}

// readlinkAt reads the symlink at rel beneath dirfd (its parent resolved
// through no symlink).
func readlinkAt(dirfd int, rel string) (string, error) {
	dir, base := splitRel(rel)
	pfd, err := openBeneath(dirfd, dir, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(pfd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(pfd, base, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// splitRel splits a relative slash path into its directory ("" for the
// root) and last component.
func splitRel(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// within reports whether p is dir or below it ("" is the root, which
// holds everything).
func within(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}
