//go:build linux

// Command probe issues one exact system call and prints how it ended: "ok",
// or the errno's name (EPERM, ENOSYS, ...). The seccomp tests run it inside
// sandboxes (built static, mounted read-only) to check what the filter
// refuses; a shell or busybox applet cannot pass these exact arguments.
//
//	probe OP [ARG...]
//
// Paths and modes are the caller's: probe chmod /tmp/f 4755 is
// chmod("/tmp/f", 04755). The exit status is 0 whatever the call did, 2 for
// a usage error.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type op struct {
	args int
	fn   func(a []string) error
	help string
}

var ops = map[string]op{
	"chmod":     {2, pathMode(func(p *byte, m uintptr) error { return call(unix.SYS_FCHMODAT, atFDCWD, ptr(p), m) }), "PATH MODE: fchmodat(AT_FDCWD, PATH, MODE) (chmod(2) where the ABI has it)"},
	"fchmod":    {2, fchmod, "PATH MODE: fchmod(open(PATH), MODE)"},
	"fchmodat2": {2, pathMode(func(p *byte, m uintptr) error { return call(unix.SYS_FCHMODAT2, atFDCWD, ptr(p), m, 0) }), "PATH MODE: fchmodat2(AT_FDCWD, PATH, MODE, 0)"},
	"openat": {2, pathMode(func(p *byte, m uintptr) error {
		return closeFD(unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(p), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, m, 0, 0))
	}), "PATH MODE: openat(AT_FDCWD, PATH, O_CREAT|O_EXCL|O_WRONLY, MODE)"},
	"tmpfile": {3, tmpfile, "DIR MODE LINK: openat(DIR, O_TMPFILE|O_WRONLY, MODE), then link it at LINK"},
	"mknod": {2, pathMode(func(p *byte, m uintptr) error {
		return call(unix.SYS_MKNODAT, atFDCWD, ptr(p), unix.S_IFREG|m, 0)
	}), "PATH MODE: mknodat(AT_FDCWD, PATH, S_IFREG|MODE, 0)"},
	"mkdir":  {2, pathMode(func(p *byte, m uintptr) error { return call(unix.SYS_MKDIRAT, atFDCWD, ptr(p), m) }), "PATH MODE: mkdirat(AT_FDCWD, PATH, MODE)"},
	"legacy": {3, legacy, "CALL PATH MODE: the old open/creat/chmod/mkdir/mknod system calls (amd64)"},
	"int80":  {3, int80Op, "CALL PATH MODE: chmod/getuid through the i386 ABI (int 0x80; amd64), in a child: SIGSYS when the filter kills it"},
	"x32":    {0, x32, "getuid through the x32 ABI (amd64), in a child: SIGSYS when the filter kills it"},
	"keyring": {0, func([]string) error {
		return call(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, keySpec(unix.KEY_SPEC_SESSION_KEYRING), 0)
	}, "keyctl(KEYCTL_GET_KEYRING_ID, @s)"},
	"keyread": {1, keyread, "ID: keyctl(KEYCTL_READ, ID)"},
	"addkey":  {0, addkey, "add_key(user, ..., @p)"},
	"clone":   {1, cloneNS, "FLAGS: start a child (clone) with namespace FLAGS: user, mount, net, pid, uts, ipc, cgroup"},
	"unshare": {1, unshareNS, "FLAGS: unshare(FLAGS) on a locked thread (user needs a single thread: expect EINVAL unfiltered)"},
	"setns":   {0, setns, "setns(open(/proc/self/ns/uts), CLONE_NEWUTS)"},
	"clone3":  {0, func([]string) error { return call(unix.SYS_CLONE3, 0, 0) }, "clone3(NULL, 0): EINVAL when allowed, ENOSYS when filtered"},
	"openat2": {0, func([]string) error { return call(unix.SYS_OPENAT2, atFDCWD, ptr(cstr(".")), 0, 0) }, "openat2(AT_FDCWD, \".\", NULL, 0): EINVAL when allowed"},
	"mount": {0, func([]string) error {
		return call(unix.SYS_MOUNT, ptr(cstr("none")), ptr(cstr("/nonexistent-sbprobe")), ptr(cstr("tmpfs")), 0, 0)
	}, "mount on a missing path: ENOENT when allowed"},
	"umount": {0, func([]string) error { return call(unix.SYS_UMOUNT2, ptr(cstr("/nonexistent-sbprobe")), 0) }, "umount2 of a missing path"},
	"opentree": {0, func([]string) error {
		return closeFD(unix.Syscall(unix.SYS_OPEN_TREE, atFDCWD, ptr(cstr("/")), unix.O_CLOEXEC))
	}, "open_tree(AT_FDCWD, /, 0): allowed unprivileged"},
	"fsopen": {0, func([]string) error {
		return closeFD(unix.Syscall(unix.SYS_FSOPEN, ptr(cstr("tmpfs")), unix.FSOPEN_CLOEXEC, 0))
	}, "fsopen(tmpfs)"},
	"bpf":  {0, bpfOp, "bpf(BPF_MAP_CREATE, array)"},
	"perf": {0, perf, "perf_event_open(task clock of itself, user only)"},
	"uffd": {0, func([]string) error {
		return closeFD(unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|uffdUserModeOnly, 0, 0))
	}, "userfaultfd(UFFD_USER_MODE_ONLY)"},
	"iouring": {0, iouring, "io_uring_setup(1)"},
	"kexec":   {0, func([]string) error { return call(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) }, "kexec_load(0, 0, NULL, 0)"},
	"ioctl":   {1, ioctlOp, "REQ: ioctl(open(/dev/null), REQ, &c): tiocsti, tiocsti-hi (high bits set), tioclinux, fionread"},
	"personality": {1, func(a []string) error {
		v, err := strconv.ParseUint(a[0], 0, 64)
		if err != nil {
			return usage(err)
		}
		_, _, e := unix.RawSyscall(unix.SYS_PERSONALITY, uintptr(v), 0, 0)
		return errnoOf(e)
	}, "VALUE: personality(VALUE)"},
	"ptrace":  {0, ptraceOp, "ptrace a child of its own (allowed, as in Docker's profile)"},
	"seccomp": {0, seccompMode, "print the Seccomp line of /proc/self/status"},
	"bench":   {1, bench, "N: N getppid calls, prints ns per call"},
	"nop":     {0, func([]string) error { os.Exit(0); return nil }, "nothing, silently (the child of clone and ptrace)"},
}

const (
	uffdUserModeOnly = 1
	kexecBadArch     = 0xff << 16 // KEXEC_ARCH_MASK bits naming no architecture
)

var atFDCWD = uintptr(uint64(0xffffffffffffffff) - 99) // AT_FDCWD (-100) as a register value

func main() {
	if len(os.Args) < 2 {
		help()
	}
	o, ok := ops[os.Args[1]]
	if !ok || len(os.Args)-2 != o.args {
		help()
	}
	err := o.fn(os.Args[2:])
	var u usageError
	switch {
	case err == nil:
		fmt.Println("ok")
	case asUsage(err, &u):
		fmt.Fprintln(os.Stderr, "probe:", u.error)
		os.Exit(2)
	case isErrno(err):
		fmt.Println(unix.ErrnoName(err.(syscall.Errno)))
	default:
		fmt.Println(err)
	}
}

func help() {
	fmt.Fprintln(os.Stderr, "usage: probe OP [ARG...]; OPs:")
	for name, o := range ops {
		fmt.Fprintf(os.Stderr, "  %-12s %s\n", name, o.help)
	}
	os.Exit(2)
}

type usageError struct{ error }

func usage(err error) error { return usageError{err} }

func asUsage(err error, u *usageError) bool {
	v, ok := err.(usageError)
	*u = v
	return ok
}

func isErrno(err error) bool { _, ok := err.(syscall.Errno); return ok }

func errnoOf(e syscall.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

func call(nr uintptr, a ...uintptr) error {
	var r [6]uintptr
	copy(r[:], a)
	_, _, e := unix.Syscall6(nr, r[0], r[1], r[2], r[3], r[4], r[5])
	return errnoOf(e)
}

// closeFD closes what a successful fd-returning call returned.
func closeFD(fd, _ uintptr, e syscall.Errno) error {
	if e != 0 {
		return e
	}
	unix.Close(int(fd))
	return nil
}

func cstr(s string) *byte {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(2)
	}
	return p
}

func ptr(p *byte) uintptr { return uintptr(unsafe.Pointer(p)) }

func keySpec(id int) uintptr { return uintptr(uint64(int64(id))) }

func parseMode(s string) (uintptr, error) {
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return 0, usage(fmt.Errorf("mode %q: want octal", s))
	}
	return uintptr(m), nil
}

func pathMode(f func(p *byte, mode uintptr) error) func([]string) error {
	return func(a []string) error {
		m, err := parseMode(a[1])
		if err != nil {
			return err
		}
		p := cstr(a[0])
		err = f(p, m)
		runtime.KeepAlive(p)
		return err
	}
}

func fchmod(a []string) error {
	m, err := parseMode(a[1])
	if err != nil {
		return err
	}
	fd, err := unix.Open(a[0], unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return call(unix.SYS_FCHMOD, uintptr(fd), m)
}

func tmpfile(a []string) error {
	m, err := parseMode(a[1])
	if err != nil {
		return err
	}
	p := cstr(a[0])
	fd, _, e := unix.Syscall6(unix.SYS_OPENAT, atFDCWD, ptr(p), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, m, 0, 0)
	runtime.KeepAlive(p)
	if e != 0 {
		return e
	}
	defer unix.Close(int(fd))
	// Linking by /proc/self/fd needs no privilege (AT_EMPTY_PATH would).
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(fd)), unix.AT_FDCWD, a[2], unix.AT_SYMLINK_FOLLOW)
}

func legacy(a []string) error {
	nr, ok := legacyCalls[a[0]]
	if !ok {
		return usage(fmt.Errorf("no legacy %q system call on %s", a[0], runtime.GOARCH))
	}
	return pathMode(func(p *byte, m uintptr) error {
		switch a[0] {
		case "open":
			return closeFD(unix.Syscall(nr, ptr(p), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, m))
		case "creat":
			return closeFD(unix.Syscall(nr, ptr(p), m, 0))
		case "mknod":
			return call(nr, ptr(p), unix.S_IFREG|m, 0)
		}
		return call(nr, ptr(p), m)
	})(a[1:])
}

func int80Op(a []string) error {
	if !haveInt80 {
		return usage(fmt.Errorf("no i386 ABI from %s", runtime.GOARCH))
	}
	switch a[0] {
	case "getuid":
		return runChild(childELF(int80Code(i386Getuid), nil))
	case "chmod":
	default:
		return usage(fmt.Errorf("int80 %q: want chmod or getuid", a[0]))
	}
	m, err := parseMode(a[2])
	if err != nil {
		return err
	}
	// The i386 ABI takes 32-bit pointers: the path is in the child's
	// segment, below 4 GiB.
	return runChild(childELF(int80Code(i386Chmod, childData, uint32(m)), []byte(a[1]+"\x00")))
}

func x32(a []string) error {
	if !haveX32 {
		return usage(fmt.Errorf("no x32 ABI on %s", runtime.GOARCH))
	}
	return runChild(childELF(syscallCode(x32Bit|x32Getuid), nil))
}

func keyread(a []string) error {
	id, err := strconv.Atoi(a[0])
	if err != nil {
		return usage(err)
	}
	buf := make([]byte, 256)
	return call(unix.SYS_KEYCTL, unix.KEYCTL_READ, uintptr(id), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
}

func addkey([]string) error {
	t, d, p := cstr("user"), cstr("sandbash-probe"), cstr("x")
	err := call(unix.SYS_ADD_KEY, ptr(t), ptr(d), ptr(p), 1, keySpec(unix.KEY_SPEC_PROCESS_KEYRING))
	runtime.KeepAlive(t)
	runtime.KeepAlive(d)
	runtime.KeepAlive(p)
	return err
}

var nsFlags = map[string]uintptr{
	"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET, "pid": unix.CLONE_NEWPID,
	"uts": unix.CLONE_NEWUTS, "ipc": unix.CLONE_NEWIPC, "cgroup": unix.CLONE_NEWCGROUP,
}

func nsFlag(s string) (uintptr, error) {
	f, ok := nsFlags[s]
	if !ok {
		return 0, usage(fmt.Errorf("namespace %q: want one of user, mount, net, pid, uts, ipc, cgroup", s))
	}
	return f, nil
}

func cloneNS(a []string) error {
	f, err := nsFlag(a[0])
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pid, err := syscall.ForkExec(self, []string{"probe", "nop"}, &syscall.ProcAttr{
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Cloneflags: f},
	})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil)
	return nil
}

func unshareNS(a []string) error {
	f, err := nsFlag(a[0])
	if err != nil {
		return err
	}
	runtime.LockOSThread() // never unlocked: the thread may have changed namespace
	return call(unix.SYS_UNSHARE, f)
}

func setns([]string) error {
	fd, err := unix.Open("/proc/self/ns/uts", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	runtime.LockOSThread()
	return call(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWUTS)
}

func bpfOp([]string) error {
	// union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size,
	// max_entries.
	attr := [16]uint32{unix.BPF_MAP_TYPE_ARRAY, 4, 4, 1}
	return closeFD(unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_CREATE, uintptr(unsafe.Pointer(&attr[0])), unsafe.Sizeof(attr)))
}

func perf([]string) error {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: unix.PERF_COUNT_SW_TASK_CLOCK,
		Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
	}
	attr.Size = uint32(unsafe.Sizeof(attr))
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

func iouring([]string) error {
	var params [120]byte // struct io_uring_params
	r, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if e != 0 {
		return e
	}
	unix.Close(int(r))
	return nil
}

var ioctls = map[string]uintptr{
	"tiocsti":    unix.TIOCSTI,
	"tiocsti-hi": 1<<32 | unix.TIOCSTI, // the kernel reads only the low 32 bits
	"tioclinux":  unix.TIOCLINUX,
	"fionread":   unix.TIOCINQ, // FIONREAD
}

func ioctlOp(a []string) error {
	req, ok := ioctls[a[0]]
	if !ok {
		return usage(fmt.Errorf("ioctl %q: want tiocsti, tiocsti-hi, tioclinux or fionread", a[0]))
	}
	if req > 0xffffffff && unsafe.Sizeof(req) < 8 {
		return usage(fmt.Errorf("ioctl %q needs a 64-bit ABI", a[0]))
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var c [8]byte
	return call(unix.SYS_IOCTL, uintptr(fd), req, uintptr(unsafe.Pointer(&c[0])))
}

func ptraceOp([]string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pid, err := syscall.ForkExec(self, []string{"probe", "nop"}, &syscall.ProcAttr{
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Ptrace: true},
	})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil) // stopped at exec
	err = syscall.PtraceDetach(pid)
	_, _ = syscall.Wait4(pid, &ws, 0, nil)
	return err
}

func seccompMode([]string) error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			fmt.Println(strings.TrimSpace(v))
			os.Exit(0)
		}
	}
	fmt.Println("absent")
	os.Exit(0)
	return nil
}

func bench(a []string) error {
	n, err := strconv.Atoi(a[0])
	if err != nil || n <= 0 {
		return usage(fmt.Errorf("bench %q: want a positive count", a[0]))
	}
	start := time.Now()
	for range n {
		unix.RawSyscall(unix.SYS_GETPPID, 0, 0, 0)
	}
	fmt.Printf("%.1f\n", float64(time.Since(start).Nanoseconds())/float64(n))
	os.Exit(0)
	return nil
}
