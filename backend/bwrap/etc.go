package bwrap

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// etcAllowlist is what the sandbox sees of /etc.
var etcAllowlist = []string{
	"ssl", "ca-certificates", "ca-certificates.conf", "pki", "crypto-policies",
	"resolv.conf", "nsswitch.conf", "host.conf", "gai.conf", "hosts", "services", "protocols",
	"localtime", "timezone", "passwd", "group",
	"alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
}

// etcDir is where etcAllowlist's entries are (a test's own directory in
// tests).
var etcDir = "/etc"

// Each bind mount costs bwrap a read of the whole mount table (to make it
// read-only, nosuid and nodev), and /etc's allowlist was 18 of them here:
// half a millisecond of every call. So a regular file of the allowlist
// that every user may read anyway (mode o+r) is copied into the sandbox's
// /etc instead (bwrap --file, read-only like the rest of its root), at the
// start of each call; whatever else (directories, symbolic links, files
// not readable by all) is bound, as before, so a call reads nothing its
// user could not. The copy is of the file as it was when the call
// started: a change to it during the call is not seen (a bind mount
// shows it). Inside, the copy belongs to the call's user, mode 0444.
//
// The content is kept, for the process, in a sealed memfd, and read again
// only when the file changed (device, inode, size, times): each call gets
// its own descriptor of it (reopened through /proc/self/fd, at offset 0).
// A memfd is closed only when its file changed, under the lock, and never
// used again. A one-shot session's single call gets no memfd: its bwrap
// reads the file itself, through a descriptor sandbash opened (no symlink
// followed) and checked, as it would the memfd; a copy kept for calls to
// come would only be read for nothing.
var etcCopies struct {
	mu    sync.Mutex
	files map[string]*etcFile
}

type etcFile struct {
	stamp etcStamp
	f     *os.File // sealed memfd
}

// etcStamp is what tells a file's version apart.
type etcStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) etcStamp {
	return etcStamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// etcCopyMax is the largest file copied rather than bound.
const etcCopyMax = 1 << 20

// copyable reports whether st is of a file the sandbox gets a copy of.
func copyable(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o004 != 0 && st.Size <= etcCopyMax
}

// etcArgs returns bwrap's options that give a call the allowlist of /etc,
// passing the copies' descriptors with l (with oneShot, the files' own:
// see etcCopies). With network on, resolv.conf is slirp4netns's
// (startCmd).
func etcArgs(l *launch, network backend.Network, oneShot bool) []string {
	var a []string
	for _, e := range etcAllowlist {
		if e == "resolv.conf" && network == backend.NetworkOn {
			continue
		}
		p := etcDir + "/" + e
		dst := "/etc/" + e
		var f *os.File
		var st unix.Stat_t
		if oneShot {
			f = openEtcFile(p)
		} else if unix.Lstat(p, &st) == nil && copyable(&st) {
			f = openEtcCopy(p, &st)
		}
		if f != nil {
			a = append(a, "--perms", "0444", "--file", strconv.Itoa(l.pass(f)), dst)
			continue
		}
		if _, err := os.Stat(p); err == nil {
			a = append(a, "--ro-bind", p, dst)
		}
	}
	return a
}

// warmEtc reads the files of list in dir that calls get copies of, so
// that the first call finds them ready.
func warmEtc(dir string, list []string) {
	for _, e := range list {
		p := dir + "/" + e
		var st unix.Stat_t
		if unix.Lstat(p, &st) == nil && copyable(&st) {
			if f := openEtcCopy(p, &st); f != nil {
				f.Close()
			}
		}
	}
}

// openEtcFile opens the file at p for bwrap to copy, if it is one the
// sandbox gets a copy of (checked on what was opened); nil otherwise.
func openEtcFile(p string) *os.File {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || !copyable(&st) {
		unix.Close(fd)
		return nil
	}
	return os.NewFile(uintptr(fd), p)
}

// openEtcCopy returns a descriptor of its own of the copy of the file at p
// (whose lstat is st), reading the file if it changed since it was last
// read; nil if it cannot (the caller binds the file instead).
func openEtcCopy(p string, st *unix.Stat_t) *os.File {
	c := &etcCopies
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.files[p]
	if cur == nil || cur.stamp != stampOf(st) {
		nf, err := readEtcFile(p)
		if err != nil {
			return nil
		}
		if cur != nil {
			cur.f.Close()
		}
		if c.files == nil {
			c.files = map[string]*etcFile{}
		}
		c.files[p], cur = nf, nf
		if nf.stamp != stampOf(st) {
			return nil // it changed meanwhile: bind it this time
		}
	}
	f, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(cur.f.Fd())), os.O_RDONLY, 0)
	if err != nil {
		return nil
	}
	return f
}

// readEtcFile copies the file at p into a sealed memfd, if it is still
// copyable and did not change while it was read.
func readEtcFile(p string) (*etcFile, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	src := os.NewFile(uintptr(fd), p)
	defer src.Close()
	var before, after unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		return nil, err
	}
	if !copyable(&before) {
		return nil, fmt.Errorf("%s: not a regular file every user may read", p)
	}
	data, err := io.ReadAll(io.LimitReader(src, etcCopyMax+1))
	if err != nil {
		return nil, err
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return nil, err
	}
	if stampOf(&after) != stampOf(&before) || int64(len(data)) != before.Size {
		return nil, fmt.Errorf("%s changed while it was read", p)
	}
	mfd, err := unix.MemfdCreate("sandbash-etc", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(mfd), "sandbash-etc")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := unix.FcntlInt(uintptr(mfd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		f.Close()
		return nil, err
	}
	return &etcFile{stamp: stampOf(&before), f: f}, nil
}
