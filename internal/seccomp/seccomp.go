// Package seccomp is the one list of system calls sandbash refuses inside
// every sandbox, and its two renderings:
//
//   - [Program]: a classic BPF program for bubblewrap's --seccomp, which
//     refuses the list and lets everything else through (bwrap has no filter
//     of its own);
//   - [Profile]: a Docker/OCI JSON seccomp profile for Docker and Podman:
//     Podman's default allowlist (go.podman.io/common/pkg/seccomp's, kept
//     in package oci; derived from Docker's default profile, in Docker's
//     format) with the same list taken out of it.
//
// The list ([Rules]) refuses: setuid and setgid mode bits wherever a mode is
// given (chmod, fchmod, fchmodat, fchmodat2, open/openat/creat with O_CREAT
// or O_TMPFILE, mknod, mknodat), so a call cannot leave a setuid file where
// the host finds it; openat2 and clone3 (ENOSYS: their arguments sit behind
// pointers a filter cannot read, and libc falls back to openat and clone);
// io_uring, whose operations bypass argument checks; new namespaces (clone
// and unshare with CLONE_NEW*, setns), so no nested user namespace; the
// mount family, old and new API; keyrings (keyctl, add_key, request_key);
// bpf, perf_event_open, userfaultfd; loading kernels and modules, rebooting,
// swap, accounting, the clock, the kernel log, quotas, raw I/O ports,
// open_by_handle_at. On bwrap only (see [Rule].BwrapOnly for why the
// containers need not): the TIOCSTI and TIOCLINUX ioctls, and personality
// values other than the ones Docker allows.
//
// # Why github.com/elastic/go-seccomp-bpf
//
// It is pure Go (sandbash builds with CGO_ENABLED=0 and without build tags;
// libseccomp-golang needs cgo and libseccomp's headers everywhere sandbash is
// built), maintained, has syscall tables for amd64 and arm64 generated from
// the kernel, compiles argument conditions, and refuses x32 system calls on
// amd64. Two things it does not do, handled here and tested against a BPF
// interpreter and the real kernel:
//
//   - A call from another architecture (int 0x80 on amd64, AArch32 on arm64)
//     jumps to the policy's default action, which for a deny-list is allow.
//     [Program] puts a guard in front that answers ENOSYS to any
//     architecture but the native one, and to system calls newer than the
//     library's table (Linux 6.15), as Docker's and Podman's allowlists do.
//   - Its comparisons are 64-bit, but ioctl's request and personality's
//     argument are 32-bit in the kernel, so high bits would slip past an
//     equality test. [Equal32] compares the low 32 bits only, as a set of
//     bit tests.
//
// Its ActionErrno returns EPERM; rules here give their errno explicitly and
// never return 0 (which would fake success).
package seccomp

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Op is how a Cond tests an argument.
type Op int

const (
	// AnySet holds when the argument has any of Value's bits set.
	AnySet Op = iota
	// Equal32 holds when the argument's low 32 bits equal Value (the kernel
	// reads only those of an int argument, whatever the register holds).
	Equal32
	// NotEqual holds when the whole 64-bit argument differs from Value.
	NotEqual
)

// Cond tests one argument of a system call.
type Cond struct {
	Arg   int // 0 to 5
	Op    Op
	Value uint64
}

// Rule refuses the system calls Names with Errno: always when When is
// empty, otherwise when every Cond of When holds.
type Rule struct {
	Names []string
	Errno syscall.Errno
	When  []Cond
	// BwrapOnly says why the container profile leaves this rule to its base
	// profile; "" means the profile enforces it too.
	BwrapOnly string
	// What the rule is for, in a few words (for doctor and the tests).
	What string
}

// Mode bits and flags the rules test.
const (
	setIDBits = unix.S_ISUID | unix.S_ISGID
	// oTmpfile is the kernel's __O_TMPFILE: O_TMPFILE without O_DIRECTORY.
	oTmpfile = unix.O_TMPFILE &^ unix.O_DIRECTORY
	// newNamespaces are the CLONE_NEW* flags clone takes.
	newNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	// personalityAllowed are the personality bits Docker's profile allows
	// (PER_LINUX32, UNAME26, in the combinations 0, 8, 0x20000, 0x20008);
	// 0xffffffff, the query, is allowed too.
	personalityAllowed = 0x0008 | 0x20000
)

func modeRule(what string, names []string, arg int) Rule {
	return Rule{Names: names, Errno: unix.EPERM, When: []Cond{{Arg: arg, Op: AnySet, Value: setIDBits}}, What: what}
}

// Rules is sandbash's list, in the order the BPF program tests it. Names a
// native architecture lacks (creat on arm64, say) are skipped there.
var Rules = []Rule{
	// mkdir and mkdirat are not here: the kernel drops S_ISUID and S_ISGID
	// from their mode (a directory gets S_ISGID only from its parent), and
	// `mkdir -m 2755` is mkdir, then chmod.
	modeRule("setuid/setgid bits in a mode (arg 1)", []string{"chmod", "fchmod", "creat", "mknod"}, 1),
	modeRule("setuid/setgid bits in a mode (arg 2)", []string{"fchmodat", "fchmodat2", "mknodat"}, 2),
	{Names: []string{"open"}, Errno: unix.EPERM, What: "open(O_CREAT|O_TMPFILE) with setuid/setgid bits",
		When: []Cond{{Arg: 1, Op: AnySet, Value: unix.O_CREAT | oTmpfile}, {Arg: 2, Op: AnySet, Value: setIDBits}}},
	{Names: []string{"openat"}, Errno: unix.EPERM, What: "openat(O_CREAT|O_TMPFILE) with setuid/setgid bits",
		When: []Cond{{Arg: 2, Op: AnySet, Value: unix.O_CREAT | oTmpfile}, {Arg: 3, Op: AnySet, Value: setIDBits}}},
	{Names: []string{"openat2", "clone3"}, Errno: unix.ENOSYS,
		What: "openat2 and clone3 (their mode and flags are behind a pointer; libc falls back on ENOSYS)"},
	{Names: []string{"io_uring_setup", "io_uring_enter", "io_uring_register"}, Errno: unix.EPERM,
		What: "io_uring (its operations bypass argument checks)"},
	{Names: []string{"clone"}, Errno: unix.EPERM, What: "clone into new namespaces",
		When: []Cond{{Arg: 0, Op: AnySet, Value: newNamespaces}}},
	{Names: []string{"unshare"}, Errno: unix.EPERM, What: "unshare of namespaces",
		When: []Cond{{Arg: 0, Op: AnySet, Value: newNamespaces | unix.CLONE_NEWTIME}}},
	{Names: []string{"setns"}, Errno: unix.EPERM, What: "joining namespaces"},
	{Names: []string{"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
		"open_tree", "open_tree_attr", "move_mount", "mount_setattr"}, Errno: unix.EPERM, What: "mounts, old and new API"},
	{Names: []string{"keyctl", "add_key", "request_key"}, Errno: unix.EPERM, What: "kernel keyrings"},
	{Names: []string{"bpf", "perf_event_open", "userfaultfd"}, Errno: unix.EPERM, What: "bpf, perf events, userfaultfd"},
	{Names: []string{"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
		"reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "syslog",
		"quotactl", "quotactl_fd", "lookup_dcookie", "iopl", "ioperm", "open_by_handle_at",
		"sethostname", "setdomainname", "vhangup", "uselib", "ustat", "sysfs", "nfsservctl"},
		Errno: unix.EPERM, What: "host administration (Docker's default profile refuses these too)"},
	{Names: []string{"ioctl"}, Errno: unix.EPERM, What: "ioctl TIOCSTI (typing into a terminal)",
		When:      []Cond{{Arg: 1, Op: Equal32, Value: unix.TIOCSTI}},
		BwrapOnly: "a container has no terminal, and the kernel refuses TIOCSTI without CAP_SYS_ADMIN on any tty but the caller's controlling one"},
	{Names: []string{"ioctl"}, Errno: unix.EPERM, What: "ioctl TIOCLINUX (the virtual console's selection buffer)",
		When:      []Cond{{Arg: 1, Op: Equal32, Value: unix.TIOCLINUX}},
		BwrapOnly: "a container has no virtual console"},
	{Names: []string{"personality"}, Errno: unix.EPERM, What: "personality flags Docker refuses (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...)",
		When:      []Cond{{Arg: 0, Op: AnySet, Value: 0xffffffff &^ personalityAllowed}, {Arg: 0, Op: NotEqual, Value: 0xffffffff}},
		BwrapOnly: "the base profile allows only the same values"},
}

// Summary describes [Program]'s list in one line, for `sandbash doctor`.
func Summary() string { return summary(true) }

func summary(bwrap bool) string {
	n := 0
	seen := map[string]bool{}
	for _, r := range Rules {
		for _, name := range r.Names {
			if !seen[name] && (bwrap || r.BwrapOnly == "") {
				seen[name] = true
				n++
			}
		}
	}
	s := fmt.Sprintf("%d system calls refused or narrowed (setuid/setgid modes, new namespaces, mounts, keyrings, bpf, perf, userfaultfd, io_uring, openat2 and clone3 -> ENOSYS", n)
	if bwrap {
		s += ", TIOCSTI, other ABIs"
	}
	return s + ", ...)"
}

// names lists every name of the rules, once each, in order.
func names() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range Rules {
		for _, n := range r.Names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	return out
}

func (r Rule) String() string { return strings.Join(r.Names, ",") + ": " + r.What }
