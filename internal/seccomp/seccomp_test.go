package seccomp

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	oci "go.podman.io/common/pkg/seccomp"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/internal/seccomp/probebuild"
)

const allow = unix.SECCOMP_RET_ALLOW

// run evaluates the filter on one system call the way the kernel would.
// x/net/bpf loads words big-endian, so each 32-bit word of struct
// seccomp_data is laid out big-endian at the offset the kernel (little
// endian here) has it: an argument's low word first.
func run(t *testing.T, vm *bpf.VM, auditArch uint32, nr uint32, args ...uint64) uint32 {
	t.Helper()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the simulation lays out seccomp_data for little-endian machines")
	}
	var d [64]byte
	binary.BigEndian.PutUint32(d[0:], nr)
	binary.BigEndian.PutUint32(d[4:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(d[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(d[20+8*i:], uint32(a>>32))
	}
	r, err := vm.Run(d[:])
	if err != nil {
		t.Fatal(err)
	}
	return uint32(r)
}

func nativeVM(t *testing.T) (*bpf.VM, *arch.Info) {
	t.Helper()
	prog, err := Instructions()
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return vm, info
}

func nr(t *testing.T, info *arch.Info, name string) uint32 {
	t.Helper()
	n, ok := info.SyscallNames[name]
	if !ok {
		t.Fatalf("no %s on %s", name, info.Name)
	}
	return uint32(n)
}

var (
	eperm  = retErrno(unix.EPERM)
	enosys = retErrno(unix.ENOSYS)
)

// TestProgramSimulated runs the compiled filter in a BPF interpreter: every
// rule refuses what it should with its errno, everything else passes, and
// neither another ABI nor high bits in a 32-bit argument get around it.
func TestProgramSimulated(t *testing.T) {
	vm, info := nativeVM(t)
	id := uint32(info.ID)
	cases := []struct {
		name string
		args []uint64
		want uint32
	}{
		{"fchmodat", []uint64{0, 0, 0o4755}, eperm},
		{"fchmodat", []uint64{0, 0, 0o2755}, eperm},
		{"fchmodat", []uint64{0, 0, 0o6000}, eperm},
		{"fchmodat", []uint64{0, 0, 0o1777}, allow},
		{"fchmodat", []uint64{0, 0, 0o755}, allow},
		{"fchmodat", []uint64{0, 0, 1<<32 | 0o755}, allow}, // the kernel reads a 16-bit mode
		{"fchmodat2", []uint64{0, 0, 0o4755, 0}, eperm},
		{"fchmod", []uint64{3, 0o2755}, eperm},
		{"fchmod", []uint64{3, 0o644}, allow},
		{"mkdirat", []uint64{0, 0, 0o2755}, allow}, // the kernel drops the bit
		{"mkdirat", []uint64{0, 0, 0o755}, allow},
		{"mknodat", []uint64{0, 0, unix.S_IFREG | 0o4755, 0}, eperm},
		{"mknodat", []uint64{0, 0, unix.S_IFIFO | 0o644, 0}, allow},
		{"openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o4755}, eperm},
		{"openat", []uint64{0, 0, unix.O_TMPFILE | unix.O_WRONLY, 0o2755}, eperm},
		{"openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, allow},
		{"openat", []uint64{0, 0, unix.O_RDONLY, 0o4755}, allow}, // no O_CREAT: the kernel ignores the mode
		{"openat", []uint64{0, 0, unix.O_RDONLY, 0}, allow},
		{"openat2", []uint64{0, 0, 0, 0}, enosys},
		{"clone3", []uint64{0, 0}, enosys},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone", []uint64{unix.CLONE_NEWNS}, eperm},
		{"clone", []uint64{unix.CLONE_NEWNET}, eperm},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, allow},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, allow},
		{"unshare", []uint64{unix.CLONE_NEWUSER}, eperm},
		{"unshare", []uint64{unix.CLONE_NEWTIME}, eperm},
		{"unshare", []uint64{unix.CLONE_FS | unix.CLONE_FILES}, allow},
		{"setns", []uint64{3, 0}, eperm},
		{"mount", nil, eperm},
		{"umount2", nil, eperm},
		{"pivot_root", nil, eperm},
		{"fsopen", nil, eperm},
		{"fsmount", nil, eperm},
		{"fsconfig", nil, eperm},
		{"fspick", nil, eperm},
		{"open_tree", nil, eperm},
		{"move_mount", nil, eperm},
		{"mount_setattr", nil, eperm},
		{"keyctl", nil, eperm},
		{"add_key", nil, eperm},
		{"request_key", nil, eperm},
		{"bpf", nil, eperm},
		{"perf_event_open", nil, eperm},
		{"userfaultfd", nil, eperm},
		{"io_uring_setup", nil, eperm},
		{"io_uring_enter", nil, eperm},
		{"io_uring_register", nil, eperm},
		{"kexec_load", nil, eperm},
		{"kexec_file_load", nil, eperm},
		{"init_module", nil, eperm},
		{"finit_module", nil, eperm},
		{"delete_module", nil, eperm},
		{"reboot", nil, eperm},
		{"swapon", nil, eperm},
		{"acct", nil, eperm},
		{"settimeofday", nil, eperm},
		{"clock_settime", nil, eperm},
		{"syslog", nil, eperm},
		{"open_by_handle_at", nil, eperm},
		{"quotactl", nil, eperm},
		{"ioctl", []uint64{0, unix.TIOCSTI, 0}, eperm},
		{"ioctl", []uint64{0, 1<<32 | unix.TIOCSTI, 0}, eperm},
		{"ioctl", []uint64{0, 0xdeadbeef<<32 | unix.TIOCLINUX, 0}, eperm},
		{"ioctl", []uint64{0, unix.TIOCLINUX, 0}, eperm},
		{"ioctl", []uint64{0, unix.TIOCSTI | 1<<20, 0}, allow},
		{"ioctl", []uint64{0, unix.TCGETS, 0}, allow},
		{"ioctl", []uint64{0, unix.TIOCINQ, 0}, allow},
		{"ioctl", []uint64{0, unix.TIOCGWINSZ, 0}, allow},
		{"personality", []uint64{0}, allow},
		{"personality", []uint64{8}, allow},
		{"personality", []uint64{0x20000}, allow},
		{"personality", []uint64{0x20008}, allow},
		{"personality", []uint64{0xffffffff}, allow},
		{"personality", []uint64{addrNoRandomize}, eperm},
		{"personality", []uint64{readImpliesExec}, eperm},
		{"personality", []uint64{1<<32 | addrNoRandomize}, eperm},
		{"read", []uint64{0, 0, 0}, allow},
		{"write", []uint64{1, 0, 0}, allow},
		{"execve", nil, allow},
		{"ptrace", nil, allow},
		{"prctl", nil, allow},
		{"seccomp", nil, allow},
	}
	if runtime.GOARCH == "amd64" {
		cases = append(cases, []struct {
			name string
			args []uint64
			want uint32
		}{
			{"chmod", []uint64{0, 0o4755}, eperm},
			{"chmod", []uint64{0, 0o755}, allow},
			{"creat", []uint64{0, 0o6755}, eperm},
			{"mkdir", []uint64{0, 0o2775}, allow},
			{"mknod", []uint64{0, unix.S_IFREG | 0o4755, 0}, eperm},
			{"open", []uint64{0, unix.O_CREAT, 0o4755}, eperm},
			{"open", []uint64{0, unix.O_RDONLY, 0o4755}, allow},
			{"iopl", nil, eperm},
			{"ioperm", nil, eperm},
		}...)
	}
	for _, c := range cases {
		if got := run(t, vm, id, nr(t, info, c.name), c.args...); got != c.want {
			t.Errorf("%s(%#o): %#x, want %#x", c.name, c.args, got, c.want)
		}
	}

	// Another ABI: i386 (int 0x80) on amd64, AArch32 on arm64. 15 is
	// chmod on i386; whatever the number, the answer is ENOSYS.
	for _, other := range []uint32{uint32(arch.I386.ID), uint32(arch.ARM.ID)} {
		if other == id {
			continue
		}
		for _, n := range []uint32{0, 15, 24, 120, 400} {
			if got := run(t, vm, other, n, 0, 0o4755); got != enosys {
				t.Errorf("arch %#x nr %d: %#x, want ENOSYS", other, n, got)
			}
		}
	}
	if info.ID == arch.X86_64.ID {
		// x32: same audit arch, numbers with bit 30 set.
		for _, n := range []uint32{0x40000000 + 90, 0x40000000, 0x40000000 + 1} {
			if got := run(t, vm, id, n, 0, 0o4755); got != enosys {
				t.Errorf("x32 nr %#x: %#x, want ENOSYS", n, got)
			}
		}
	}

	// Every native system call no rule names passes, whatever its
	// arguments; every one an unconditional rule names is refused.
	refused := map[string]uint32{}
	for _, r := range Rules {
		if len(r.When) == 0 {
			for _, n := range r.Names {
				refused[n] = retErrno(r.Errno)
			}
		}
	}
	named := map[string]bool{}
	for _, n := range names() {
		named[n] = true
	}
	for n, name := range info.SyscallNumbers {
		want, isRefused := refused[name]
		if !isRefused {
			if named[name] {
				continue // conditional: tested above
			}
			want = allow
		}
		for _, args := range [][]uint64{nil, {^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}} {
			if got := run(t, vm, id, uint32(n), args...); got != want {
				t.Errorf("%s (%d) with args %x: %#x, want %#x", name, n, args, got, want)
			}
		}
	}
	// Numbers past the table (system calls newer than it) answer ENOSYS;
	// the last one in it passes.
	last := 0
	for n := range info.SyscallNumbers {
		last = max(last, n)
	}
	if got := run(t, vm, id, uint32(last)); got != allow && refused[info.SyscallNumbers[last]] == 0 {
		t.Errorf("nr %d (%s), the table's last: %#x, want allow", last, info.SyscallNumbers[last], got)
	}
	for _, n := range []uint32{uint32(last) + 1, 500, 1000, 0xffffffff} {
		if got := run(t, vm, id, n); got != enosys {
			t.Errorf("nr %d: %#x, want ENOSYS", n, got)
		}
	}
}

// TestRulesKnown: every name is a system call of amd64 or arm64, and the
// native table has the ones that matter most.
func TestRulesKnown(t *testing.T) {
	for _, n := range names() {
		if _, ok := arch.X86_64.SyscallNames[n]; ok {
			continue
		}
		if _, ok := arch.AARCH64.SyscallNames[n]; ok {
			continue
		}
		t.Errorf("%s is a system call of neither amd64 nor arm64 (a typo?)", n)
	}
	_, info := nativeVM(t)
	for _, n := range []string{"fchmodat", "fchmodat2", "openat", "mkdirat", "mknodat", "clone", "clone3", "unshare", "keyctl", "mount", "fsopen", "io_uring_setup", "openat2", "ioctl"} {
		nr(t, info, n)
	}
}

// profileAction is what the profile does to one native system call with
// args when the container has no capabilities, following how runc and crun
// load it: entries that need a capability are skipped, those that exclude
// one kept; a matching ERRNO entry beats a matching ALLOW (the profile
// never has both match), and nothing matching means the default action.
func profileAction(t *testing.T, p *oci.Seccomp, name string, args ...uint64) string {
	t.Helper()
	goarch := runtime.GOARCH
	var errno, allowed []string
	for _, s := range p.Syscalls {
		if len(s.Includes.Caps) > 0 || (len(s.Includes.Arches) > 0 && !slices.Contains(s.Includes.Arches, goarch)) || slices.Contains(s.Excludes.Arches, goarch) {
			continue
		}
		if !slices.Contains(s.Names, name) && s.Name != name {
			continue
		}
		match := true
		for _, a := range s.Args {
			v := uint64(0)
			if int(a.Index) < len(args) {
				v = args[a.Index]
			}
			switch a.Op {
			case oci.OpMaskedEqual:
				match = match && v&a.Value == a.ValueTwo
			case oci.OpEqualTo:
				match = match && v == a.Value
			case oci.OpNotEqual:
				match = match && v != a.Value
			default:
				t.Fatalf("entry %v: operator %s not simulated", s.Names, a.Op)
			}
		}
		if !match {
			continue
		}
		switch s.Action {
		case oci.ActErrno:
			errno = append(errno, s.Errno)
		case oci.ActAllow:
			allowed = append(allowed, "allow")
		default:
			t.Fatalf("entry %v: action %s not simulated", s.Names, s.Action)
		}
	}
	switch {
	case len(errno) > 0 && len(allowed) > 0:
		t.Errorf("%s(%#o): both ERRNO %v and ALLOW entries match; runtimes may differ on which wins", name, args, errno)
		return "ambiguous"
	case len(errno) > 0:
		return errno[0]
	case len(allowed) > 0:
		return "allow"
	}
	return "default " + p.DefaultErrno
}

func TestProfile(t *testing.T) {
	b, err := Profile()
	if err != nil {
		t.Fatal(err)
	}
	var p oci.Seccomp
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if p.DefaultAction != oci.ActErrno {
		t.Fatalf("default action %s: the base profile must be an allowlist", p.DefaultAction)
	}
	// The native ABI only: a sub-architecture (i386 or x32 on amd64)
	// would reopen the compat entry points bwrap's filter closes.
	if len(p.ArchMap) == 0 {
		t.Fatal("the profile names no architecture")
	}
	for _, a := range p.ArchMap {
		if len(a.SubArches) > 0 {
			t.Errorf("architecture %s allows the ABIs %v too", a.Arch, a.SubArches)
		}
	}
	cases := []struct {
		name string
		args []uint64
		want string
	}{
		{"chmod", []uint64{0, 0o4755}, "EPERM"},
		{"chmod", []uint64{0, 0o2755}, "EPERM"},
		{"chmod", []uint64{0, 0o755}, "allow"},
		{"fchmod", []uint64{3, 0o6755}, "EPERM"},
		{"fchmodat", []uint64{0, 0, 0o4700}, "EPERM"},
		{"fchmodat", []uint64{0, 0, 0o1777}, "allow"},
		{"fchmodat2", []uint64{0, 0, 0o4755, 0}, "EPERM"},
		{"mkdirat", []uint64{0, 0, 0o2755}, "allow"},
		{"mknodat", []uint64{0, 0, unix.S_IFREG | 0o4755}, "EPERM"},
		{"mknodat", []uint64{0, 0, unix.S_IFIFO | 0o600}, "allow"},
		{"creat", []uint64{0, 0o4755}, "EPERM"},
		{"open", []uint64{0, unix.O_CREAT, 0o4755}, "EPERM"},
		{"open", []uint64{0, unix.O_RDONLY, 0o4755}, "allow"},
		{"openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o2755}, "EPERM"},
		{"openat", []uint64{0, 0, unix.O_TMPFILE | unix.O_RDWR, 0o4755}, "EPERM"},
		{"openat", []uint64{0, 0, unix.O_CREAT | unix.O_WRONLY, 0o644}, "allow"},
		{"openat", []uint64{0, 0, unix.O_RDONLY, 0}, "allow"},
		{"openat2", nil, "ENOSYS"},
		{"clone3", nil, "ENOSYS"},
		{"clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, "EPERM"},
		{"clone", []uint64{uint64(unix.SIGCHLD)}, "allow"},
		{"clone", []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, "allow"},
		{"unshare", []uint64{unix.CLONE_NEWUSER}, "EPERM"},
		{"unshare", []uint64{unix.CLONE_FS}, "allow"},
		{"setns", nil, "EPERM"},
		{"mount", nil, "EPERM"},
		{"fsopen", nil, "EPERM"},
		{"open_tree", nil, "EPERM"},
		{"move_mount", nil, "EPERM"},
		{"keyctl", nil, "EPERM"},
		{"add_key", nil, "EPERM"},
		{"request_key", nil, "EPERM"},
		{"bpf", nil, "EPERM"},
		{"perf_event_open", nil, "EPERM"},
		{"userfaultfd", nil, "EPERM"},
		{"io_uring_setup", nil, "EPERM"},
		{"kexec_load", nil, "EPERM"},
		{"reboot", nil, "EPERM"},
		{"read", nil, "allow"},
		{"execve", nil, "allow"},
		{"ptrace", nil, "allow"},
		{"personality", []uint64{0}, "allow"},
		{"personality", []uint64{addrNoRandomize}, "default ENOSYS"},
	}
	for _, c := range cases {
		if got := profileAction(t, &p, c.name, c.args...); got != c.want {
			t.Errorf("%s(%#o): %s, want %s", c.name, c.args, got, c.want)
		}
	}
	// No entry compares one argument twice: runc would OR the comparisons.
	for _, s := range p.Syscalls {
		seen := map[uint]bool{}
		for _, a := range s.Args {
			if seen[a.Index] {
				t.Errorf("entry %v compares argument %d twice", s.Names, a.Index)
			}
			seen[a.Index] = true
		}
		if s.Action == oci.ActErrno && (s.ErrnoRet == nil || *s.ErrnoRet == 0) {
			t.Errorf("entry %v: ERRNO without an errno would fake success", s.Names)
		}
	}
}

// The in-kernel test re-executes the test binary, which installs the filter
// and executes the probe (see TestMain).
const execEnv = "SANDBASH_SECCOMP_TEST_EXEC"

func TestMain(m *testing.M) {
	if os.Getenv(execEnv) != "" {
		filtered(os.Args[1:])
	}
	os.Exit(m.Run())
}

// filtered installs the filter on every thread, then executes argv.
func filtered(argv []string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "installing the filter:", err)
		os.Exit(3)
	}
	prog, err := Program()
	if err != nil {
		fail(err)
	}
	f := unsafe.Slice((*unix.SockFilter)(unsafe.Pointer(&prog[0])), len(prog)/8)
	fprog := unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		fail(e)
	}
	env := slices.DeleteFunc(os.Environ(), func(s string) bool { return strings.HasPrefix(s, execEnv+"=") })
	fail(unix.Exec(argv[0], argv, env))
}

// TestProgramInKernel loads the filter into the running kernel and makes
// each refused call for real, next to the same call without the filter:
// the filter must turn what worked (or failed otherwise) into its errno.
func TestProgramInKernel(t *testing.T) {
	dir := t.TempDir()
	probe, err := probebuild.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	call := func(filter bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(probe, args...)
		if filter {
			cmd = exec.Command(self, append([]string{probe}, args...)...)
			cmd.Env = append(os.Environ(), execEnv+"=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("probe %v (filter %v): %v: %s", args, filter, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// Each case makes its own fresh paths, once for the filtered call and
	// once for the same call without the filter.
	file := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := func(name string) string { return filepath.Join(dir, name) }
	const same = "as without the filter" // for what the filter must leave alone
	type probeCase struct {
		args func(tag string) []string
		want string
	}
	fixed := func(want string, args ...string) probeCase {
		return probeCase{func(string) []string { return args }, want}
	}
	cases := []probeCase{
		{func(s string) []string { return []string{"chmod", file("a" + s), "4755"} }, "EPERM"},
		{func(s string) []string { return []string{"chmod", file("b" + s), "2755"} }, "EPERM"},
		{func(s string) []string { return []string{"chmod", file("c" + s), "0755"} }, "ok"},
		{func(s string) []string { return []string{"fchmod", file("d" + s), "4755"} }, "EPERM"},
		{func(s string) []string { return []string{"fchmodat2", file("e" + s), "6755"} }, "EPERM"},
		{func(s string) []string { return []string{"openat", path("f" + s), "4755"} }, "EPERM"},
		{func(s string) []string { return []string{"openat", path("g" + s), "0644"} }, "ok"},
		{func(s string) []string { return []string{"tmpfile", dir, "2755", path("h" + s)} }, "EPERM"},
		{func(s string) []string { return []string{"mknod", path("i" + s), "4755"} }, "EPERM"},
		{func(s string) []string { return []string{"mkdir", path("j" + s), "2755"} }, "ok"}, // the kernel drops the bit
		fixed("EPERM", "clone", "user"),
		fixed("EPERM", "clone", "net"),
		fixed("EPERM", "setns"),
		fixed("ENOSYS", "clone3"),
		fixed("ENOSYS", "openat2"),
		fixed("EPERM", "mount"),
		fixed("EPERM", "opentree"),
		fixed("EPERM", "fsopen"),
		fixed("EPERM", "keyring"),
		fixed("EPERM", "addkey"),
		fixed("EPERM", "bpf"),
		fixed("EPERM", "perf"),
		fixed("EPERM", "uffd"),
		fixed("EPERM", "iouring"),
		fixed("EPERM", "ioctl", "tiocsti"),
		fixed("EPERM", "ioctl", "tiocsti-hi"),
		fixed("EPERM", "ioctl", "tioclinux"),
		fixed("ENOTTY", "ioctl", "fionread"),
		fixed("EPERM", "personality", "0x0040000"),
		fixed(same, "personality", "0xffffffff"),
		fixed(same, "ptrace"),
		fixed("2", "seccomp"),
	}
	if runtime.GOARCH == "amd64" {
		cases = append(cases,
			probeCase{func(s string) []string { return []string{"legacy", "chmod", file("k" + s), "4755"} }, "EPERM"},
			probeCase{func(s string) []string { return []string{"legacy", "open", path("l" + s), "4755"} }, "EPERM"},
			probeCase{func(s string) []string { return []string{"legacy", "creat", path("m" + s), "2755"} }, "EPERM"},
			probeCase{func(s string) []string { return []string{"legacy", "mkdir", path("n" + s), "2755"} }, "ok"},
			probeCase{func(s string) []string { return []string{"legacy", "mknod", path("o" + s), "4755"} }, "EPERM"},
			probeCase{func(s string) []string { return []string{"int80", "chmod", file("p" + s), "4755"} }, "ENOSYS"},
			fixed("ENOSYS", "int80", "getuid", "-", "0"),
			fixed("ENOSYS", "x32"),
		)
	}
	for _, c := range cases {
		args := c.args("")
		got := call(true, args...)
		if c.want == same {
			if un := call(false, args...); got != un {
				t.Errorf("probe %v: %s with the filter, %s without; want no difference", args, got, un)
			}
			continue
		}
		if got != c.want {
			t.Errorf("filtered probe %v: %s, want %s", args, got, c.want)
		}
		// Without the filter the call must end otherwise, or the case
		// proves nothing about the filter; a kernel or sysctl that refuses
		// it anyway (x32 is often off) is noted, not failed.
		if c.want != "ok" && c.want != "ENOTTY" && c.want != "2" {
			if un := call(false, c.args("-unfiltered")...); un == got {
				t.Logf("probe %v: %s with and without the filter here", args, un)
			}
		}
	}
	// Nothing the filtered calls made has a setuid or setgid bit (the
	// directories mkdir made included).
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		fi, err := os.Lstat(filepath.Join(dir, e.Name()))
		if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 && !strings.HasSuffix(e.Name(), "-unfiltered") {
			t.Errorf("%s has mode %v despite the filter", e.Name(), fi.Mode())
		}
	}
	t.Logf("getppid: %s ns unfiltered, %s ns filtered", call(false, "bench", "1000000"), call(true, "bench", "1000000"))
}

// personality flags (linux/personality.h).
const (
	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
)
