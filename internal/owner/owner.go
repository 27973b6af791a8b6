// Package owner identifies the sandbash process that owns what it leaves on
// the host (containers, volumes, staged mounts, session directories), so
// that gc removes only what a dead process of the caller's left behind.
//
// An identity is "host/boot/pidns/uid/pid/start": the host name, the boot
// id, the PID namespace, the effective uid, the PID and the process's start
// time in clock ticks since boot. Together they survive PID reuse and tell
// apart processes that are merely out of sight (another PID namespace, a
// /proc mounted with hidepid) from processes that are gone.
package owner

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Self is this process's identity.
func Self() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s/%s/%d/%d/%d", host, bootID(), pidNS(), os.Geteuid(), os.Getpid(), selfStart())
}

// selfStart is this process's start time, read once: it never changes
// while the process lives, and a run asks for it a dozen times (its marks,
// its cgroups' names, the sweeps that pass its own directories by).
var selfStart = sync.OnceValue(func() uint64 { return readStartTime(os.Getpid()) })

// ID is a parsed identity.
type ID struct {
	Host, Boot, PIDNS string
	UID, PID          int
	Start             uint64
}

// Parse parses an identity. It fails for anything else, including the
// three-part "host/pid/start" of sandbash releases before uids were
// recorded.
func Parse(s string) (ID, error) {
	f := strings.Split(s, "/")
	if len(f) != 6 {
		return ID{}, fmt.Errorf("owner: %q is not host/boot/pidns/uid/pid/start", s)
	}
	uid, err1 := strconv.Atoi(f[3])
	pid, err2 := strconv.Atoi(f[4])
	start, err3 := strconv.ParseUint(f[5], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || pid <= 0 {
		return ID{}, fmt.Errorf("owner: %q: malformed", s)
	}
	return ID{Host: f[0], Boot: f[1], PIDNS: f[2], UID: uid, PID: pid, Start: start}, nil
}

// Gone reports whether the process an identity names has certainly exited.
// It is false for a live process, for one on another host or in another
// PID namespace (which cannot be checked from here), for one this process
// cannot see but that exists (hidepid), and for anything it cannot parse.
func Gone(s string) bool {
	id, err := Parse(s)
	if err != nil {
		return false
	}
	return gone(id, env{host: hostname(), boot: bootID(), pidns: pidNS(), start: startTime, alive: alive})
}

// Collectable reports whether what the identity owns may be removed by
// this process's gc: its owner is gone and had this process's uid, or all
// is set (root collecting every user's leftovers).
func Collectable(s string, all bool) bool {
	id, err := Parse(s)
	if err != nil || !all && id.UID != os.Geteuid() {
		return false
	}
	return Gone(s)
}

// env is what gone looks at, replaceable in tests.
type env struct {
	host, boot, pidns string
	start             func(pid int) uint64
	alive             func(pid int) bool
}

func gone(id ID, e env) bool {
	switch {
	case id.Host != e.host:
		return false
	case id.Boot != e.boot:
		return true // the machine rebooted since: every process of then is gone
	case id.PIDNS != e.pidns:
		return false
	}
	if st := e.start(id.PID); st != 0 {
		return st != id.Start
	}
	// No /proc entry here: gone, unless the process exists out of sight.
	return !e.alive(id.PID)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

// bootID and pidNS do not change while a process lives: read once.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
})

var pidNS = sync.OnceValue(func() string {
	l, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSuffix(strings.TrimPrefix(l, "pid:["), "]")
})

// alive reports whether a process with this PID exists, visible or not:
// kill(pid, 0) answers EPERM for another user's process even where /proc
// hides it.
func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

func startTime(pid int) uint64 { return StartTime(pid) }

// StartTime is field 22 of /proc/PID/stat (the start time in clock ticks
// since boot), or 0 if it cannot be read.
func StartTime(pid int) uint64 {
	if pid == os.Getpid() {
		return selfStart()
	}
	return readStartTime(pid)
}

func readStartTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// File is the name, inside a directory sandbash leaves on the host (a
// session directory, a staging directory), of the file that holds the
// identity of the process that owns it.
const File = ".owner"

// Mark writes this process's identity into dir.
func Mark(dir string) error {
	return os.WriteFile(filepath.Join(dir, File), []byte(Self()), 0o600)
}

// Of returns the identity marked in dir, or an error if there is none. A
// mark is only believed when it is a regular file of this process's
// effective uid, which Mark makes: anyone can make a directory with a
// mark naming a dead process in a shared directory such as /tmp, but not
// one owned by another user.
func Of(dir string) (string, error) {
	f, err := os.OpenFile(filepath.Join(dir, File), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("owner: %s is not a regular file of uid %d", f.Name(), os.Geteuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	return string(b), err
}

// SweepDirs removes, with remove, each directory below parent whose name
// begins with prefix and whose marked owner collect approves (see Gone,
// Collectable), and returns what it removed. A directory without a mark
// (one being set up) is left alone.
func SweepDirs(parent, prefix string, collect func(owner string) bool, remove func(dir string) error) ([]string, error) {
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		if o, err := Of(dir); err != nil || !collect(o) {
			continue
		}
		if err := remove(dir); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}
