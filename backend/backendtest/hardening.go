package backendtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/seccomp/probebuild"
	"github.com/sandbash/sandbash/overlay"
)

// probes builds the seccomp probe once per Run, into a directory removed
// when Run's test ends.
type probes struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func (p *probes) get(t *testing.T) string {
	t.Helper()
	p.once.Do(func() {
		p.dir, p.err = os.MkdirTemp("", "sbprobe-")
		if p.err == nil {
			p.path, p.err = probebuild.Build(p.dir)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.path
}

func (p *probes) remove() {
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

// probe returns the path of the probe binary; a session that runs it must
// make filepath.Dir of it readable.
func (f *fixture) probe() string {
	f.t.Helper()
	return f.probes.get(f.t)
}

// setIDFiles lists what under root has a setuid or setgid bit.
func setIDFiles(f *fixture, root string) []string {
	f.t.Helper()
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrPermission) && p != root {
			return nil // overlayfs's work directory, say; the call cannot write there either
		}
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			found = append(found, fmt.Sprintf("%s (%v)", p, fi.Mode()))
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return found
}

// testSetuid: no call can leave a setuid or setgid file anywhere the host
// sees (workspace, writable path, /tmp, HOME, a cache's layer), with the
// shell's tools or with each system call that takes a mode.
func testSetuid(f *fixture) {
	probe := f.probe()
	ws, rw, host := f.dir("ws"), f.dir("rw"), f.dir("hostcache")
	writeFiles(f, host, map[string]string{"lib.txt": "cached\n"})
	const cacheTarget = backend.Home + "/.cache/suite"
	cfg := sandbash.Config{Workspace: ws, Writable: []string{rw}, Readable: []string{filepath.Dir(probe)},
		Caches: []overlay.Cache{{Name: "custom", Host: host, Target: cacheTarget}}}
	dirs := []string{ws, rw, "/tmp", backend.Home, cacheTarget}
	if f.refused(f.caps.Refuses.Caches, cfg) {
		cfg.Caches, dirs = nil, dirs[:len(dirs)-1]
	}
	s := f.open(cfg)
	ops := [][]string{
		{"chmod", "@", "4755"}, {"chmod", "@", "2755"}, {"fchmod", "@", "6755"}, {"fchmodat2", "@", "4755"},
		{"openat", "", "4755"}, {"tmpfile", ".", "2755", ""}, {"mknod", "", "4755"}, {"mkdir", "", "2755"},
	}
	if runtime.GOARCH == "amd64" {
		ops = append(ops, [][]string{
			{"legacy", "chmod", "@", "4755"}, {"legacy", "open", "", "4755"}, {"legacy", "creat", "", "2755"},
			{"legacy", "mkdir", "", "2755"}, {"legacy", "mknod", "", "4755"}, {"int80", "chmod", "@", "4755"},
		}...)
	}
	var cmd strings.Builder
	cmd.WriteString("P=" + probe + "\n")
	for _, d := range dirs {
		fmt.Fprintf(&cmd, "cd %s || exit 1\n", d)
		// The shell's own tools: whatever they print, the host check below
		// decides.
		cmd.WriteString(": > sh-chmod-u; chmod 4755 sh-chmod-u; : > sh-chmod-g; chmod g+s sh-chmod-g\n")
		cmd.WriteString("echo x > sh-src; mkdir -m 2755 sh-mkdir; cp -p sh-chmod-u sh-copy\n")
		cmd.WriteString("command -v install >/dev/null && install -m 4755 sh-src sh-install\n") // not in busybox-static
		for i, op := range ops {
			args := append([]string(nil), op...)
			name := fmt.Sprintf("probe-%d", i)
			for j, a := range args {
				switch a {
				case "@": // an existing file
					fmt.Fprintf(&cmd, ": > %s\n", name)
					args[j] = name
				case "":
					args[j] = name
				}
			}
			fmt.Fprintf(&cmd, "echo \"%s %s: $(\"$P\" %s 2>&1)\"\n", d, strings.Join(op, " "), strings.Join(args, " "))
		}
	}
	cmd.WriteString("cd /; echo done\n")
	r := f.run(s, cmd.String())
	if !strings.HasSuffix(r.Output, "done\n") {
		f.t.Fatalf("the call did not run through: exit %d\n%s", r.ExitCode, r.Output)
	}
	for _, line := range strings.Split(r.Output, "\n") {
		// mkdir may succeed: the kernel drops setuid and setgid from its
		// mode, which the host check below confirms.
		if strings.HasSuffix(line, ": ok") && !strings.Contains(line, " mkdir ") {
			f.t.Errorf("allowed: %s", line)
		}
	}
	for _, root := range []string{ws, rw, s.Dir(), host} {
		for _, bad := range setIDFiles(f, root) {
			f.t.Errorf("the host sees a setuid/setgid file the call made: %s", bad)
		}
	}
	if f.t.Failed() {
		f.t.Logf("the call's report:\n%s", r.Output)
	}
}

// keyringCanary puts a key, readable only by whoever possesses it, into a
// fresh session keyring of the calling thread, which it locks for good
// (the thread ends with the test): the one session keyring the backend
// could hand on is the one of the thread that starts the call. It checks
// that a process this thread starts does see the key.
func keyringCanary(f *fixture) (desc string, id int) {
	f.t.Helper()
	runtime.LockOSThread() // never unlocked: the thread's keyring is the test's
	if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
		f.t.Fatalf("joining a fresh session keyring: %v", e)
	}
	desc = marker()
	id, err := unix.AddKey("user", desc, []byte("canary secret"), unix.KEY_SPEC_SESSION_KEYRING)
	if err != nil {
		f.t.Fatalf("adding a canary key: %v", err)
	}
	f.t.Cleanup(func() { _, _ = unix.KeyctlInt(unix.KEYCTL_REVOKE, id, 0, 0, 0) })
	// Possessor: everything; owner, group, others: nothing. So /proc/keys
	// shows it only to a process that has this keyring. It belongs to the
	// user calls run as: /proc/keys in a user namespace lists only keys
	// whose owner is mapped there, and the filter refuses keyctl, so that
	// is how a call that possesses it would see it.
	if os.Getuid() == 0 {
		if _, err := unix.KeyctlInt(unix.KEYCTL_CHOWN, id, f.uid, f.gid, 0); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := unix.KeyctlSetperm(id, 0x3f000000); err != nil {
		f.t.Fatal(err)
	}
	out, err := exec.Command("cat", "/proc/keys").Output()
	if err != nil || !strings.Contains(string(out), desc) {
		f.t.Fatalf("a process started from this thread does not see the canary key (%v); the test cannot check the sandbox", err)
	}
	return desc, id
}

// testSeccomp: a call cannot create user namespaces, reach the keyring of
// whoever started it, use the kernel interfaces the filter refuses, or make
// system calls through another ABI.
func testSeccomp(f *fixture) {
	probe := f.probe()
	desc, id := keyringCanary(f)
	s := f.open(sandbash.Config{Readable: []string{filepath.Dir(probe)}})
	refused := [][]string{
		{"keyring"}, {"keyread", strconv.Itoa(id)}, {"addkey"}, {"clone", "user"}, {"clone", "mount"}, {"setns"},
		{"bpf"}, {"perf"}, {"uffd"}, {"iouring"}, {"mount"}, {"umount"}, {"opentree"}, {"fsopen"}, {"kexec"},
		{"ioctl", "tiocsti"}, {"ioctl", "tiocsti-hi"}, {"ioctl", "tioclinux"},
	}
	// Another ABI's entry points (i386's int 0x80, x32) are closed, even
	// for a call no rule names: ENOSYS from bwrap's filter, the thread
	// killed (SIGSYS) by the containers' (the probe makes the call in a
	// child of its own).
	var otherABI [][]string
	if runtime.GOARCH == "amd64" {
		otherABI = [][]string{{"int80", "getuid", "-", "0"}, {"x32"}}
	}
	var cmd strings.Builder
	cmd.WriteString("P=" + probe + "\n")
	cmd.WriteString("unshare -Ur true 2>/dev/null && echo 'unshare -Ur: worked'\n")
	cmd.WriteString("unshare -U true 2>/dev/null && echo 'unshare -U: worked'\n")
	fmt.Fprintf(&cmd, "grep -q %s /proc/keys && echo 'canary: visible in /proc/keys'\n", desc)
	for _, op := range append(append(refused, otherABI...), []string{"clone3"}, []string{"openat2"}, []string{"seccomp"}) {
		fmt.Fprintf(&cmd, "echo \"%[1]s: $(\"$P\" %[1]s 2>&1)\"\n", strings.Join(op, " "))
	}
	r := f.run(s, cmd.String())
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		got[k] = v
	}
	for _, k := range []string{"unshare -Ur", "unshare -U", "canary"} {
		if v, ok := got[k]; ok {
			f.t.Errorf("%s: %s", k, v)
		}
	}
	for _, op := range refused {
		k := strings.Join(op, " ")
		if v := got[k]; v == "ok" || v == "" {
			f.t.Errorf("%s: %q, want it refused", k, v)
		}
	}
	for _, op := range otherABI {
		if k := strings.Join(op, " "); got[k] != "ENOSYS" && got[k] != "SIGSYS" {
			f.t.Errorf("%s: %q, want ENOSYS or SIGSYS (another ABI's entry point closed)", k, got[k])
		}
	}
	// Their arguments are out of a filter's reach: ENOSYS makes libc fall
	// back to clone and openat, which the filter does read.
	for _, k := range []string{"clone3", "openat2"} {
		if got[k] != "ENOSYS" {
			f.t.Errorf("%s: %q, want ENOSYS", k, got[k])
		}
	}
	if got["seccomp"] != "2" {
		f.t.Errorf("Seccomp: %q in the call's /proc/self/status, want 2 (a filter in force)", got["seccomp"])
	}
	if f.t.Failed() {
		f.t.Logf("the call's report:\n%s", r.Output)
	}
}

// testNosuid: the mounts a call can write to, and the ones it reads from
// the host, ignore setuid bits (nosuid). Where a backend cannot make bind
// mounts nosuid (SuidBinds), only the caches are checked; the seccomp
// filter is what keeps setuid files out there.
func testNosuid(f *fixture) {
	ws, rw, ro, host := f.dir("ws"), f.dir("rw"), f.dir("ro"), f.dir("hostcache")
	writeFiles(f, host, map[string]string{"lib.txt": "cached\n"})
	const cacheTarget = backend.Home + "/.cache/suite"
	cfg := sandbash.Config{Workspace: ws, Writable: []string{rw}, Readable: []string{ro},
		Caches: []overlay.Cache{{Name: "custom", Host: host, Target: cacheTarget}}}
	var want []string
	if f.refused(f.caps.Refuses.Caches, cfg) {
		cfg.Caches = nil
	} else {
		want = append(want, cacheTarget)
	}
	s := f.open(cfg)
	r := f.run(s, "cat /proc/self/mountinfo")
	opts := map[string]string{} // mount point -> its options; the last mount on a point is the one in use
	for _, line := range strings.Split(r.Output, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 5 {
			opts[fields[4]] = fields[5]
		}
	}
	if !f.caps.SuidBinds {
		want = append(want, ws, rw, ro, "/tmp", backend.Home)
	}
	for _, target := range want {
		o, ok := opts[target]
		switch {
		case !ok:
			f.t.Errorf("no mount at %s in the call's mountinfo", target)
		case !strings.Contains(","+o+",", ",nosuid,"):
			f.t.Errorf("%s is mounted %s, without nosuid", target, o)
		}
	}
	if f.t.Failed() {
		f.t.Logf("mountinfo:\n%s", r.Output)
	}
}
