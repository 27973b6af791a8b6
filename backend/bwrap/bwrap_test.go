package bwrap_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

func newBackend(t *testing.T, opts ...bwrap.Option) *bwrap.Backend {
	t.Helper()
	b, err := bwrap.New(opts...)
	if err != nil {
		backendtest.Unavailable(t, "bwrap", err)
	}
	return b
}

func TestConformance(t *testing.T) {
	b := newBackend(t)
	caps := backendtest.Capabilities{Leftovers: cgroupLeftovers, NetworkNeedsRoot: os.Geteuid() != 0}
	if b.Enforcement().Memory {
		caps.MemoryLimited = func(t *testing.T, bytes int64) backend.Backend {
			l := backend.DefaultLimits()
			l.Memory = bytes
			return newBackend(t, bwrap.WithLimits(l))
		}
	}
	t.Logf("limits: %s", b.Enforcement().Summary)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) }, caps)
}

// TestConformanceRlimits runs the suite with the limits a host without
// usable cgroups gets.
func TestConformanceRlimits(t *testing.T) {
	b := newBackend(t, bwrap.WithCgroups(false))
	if e := b.Enforcement(); e.Cgroups != "" || e.Memory || e.Pids || e.CPU {
		t.Fatalf("WithCgroups(false) still enforces with cgroups: %+v", e)
	}
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t, bwrap.WithCgroups(false)) }, backendtest.Capabilities{NetworkNeedsRoot: os.Geteuid() != 0})
}

// cgroupRoots are the directories sandbash's cgroups go under on this
// host, as root.
func cgroupRoots() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*/sandbash")
	if _, err := os.Stat("/sys/fs/cgroup/sandbash"); err == nil {
		m = append(m, "/sys/fs/cgroup/sandbash")
	}
	return m
}

// cgroupLeftovers lists the cgroups of a session that still exist.
func cgroupLeftovers(t *testing.T, sessionID string) []string {
	var left []string
	for _, root := range cgroupRoots() {
		m, _ := filepath.Glob(filepath.Join(root, "*."+sessionID))
		left = append(left, m...)
	}
	return left
}

// fixture is a session spec built directly, as the root package would,
// so that a test can give the backend what the root package refuses.
func spec(t *testing.T, env []string, caches bool) *backend.SessionSpec {
	t.Helper()
	base, err := os.MkdirTemp("", "sbbwrap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 4242, 4242
	}
	mk := func(name string, mode os.FileMode) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if os.Getuid() == 0 {
			if err := os.Chown(d, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	ws := mk("ws", 0o755)
	sp := &backend.SessionSpec{
		ID: "t" + hex.EncodeToString(randBytes(6)), Workspace: ws,
		Mounts: []backend.Mount{{Source: ws, Target: ws}},
		TmpDir: mk("tmp", 0o700), HomeDir: mk("home", 0o700),
		UID: uid, GID: gid, Network: backend.NetworkNone,
		Env: append([]string{"PATH=/usr/bin:/bin", "HOME=" + backend.Home}, env...),
	}
	if caches {
		o, err := overlay.Prepare(base, []overlay.Cache{{Name: "custom", Host: mk("cache", 0o755), Target: backend.Home + "/.cache/t"}}, uid, gid)
		if err != nil {
			t.Fatal(err)
		}
		sp.Overlays = o
	}
	// As sandbash.Open does: record what the host paths are (the backend
	// checks them before every call).
	if err := workspace.Seal(sp); err != nil {
		t.Fatal(err)
	}
	return sp
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

func open(t *testing.T, b *bwrap.Backend, sp *backend.SessionSpec) backend.Session {
	t.Helper()
	s, err := b.Open(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// run runs cmd to the end and returns its output.
func run(t *testing.T, s backend.Session, cmd string) (backend.Exit, string) {
	t.Helper()
	var out bytes.Buffer
	p, err := s.Start(context.Background(), &backend.Call{Command: cmd, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	ex, err := p.Wait()
	if err != nil {
		t.Fatalf("%q: %v (output %q)", cmd, err, out.String())
	}
	return ex, out.String()
}

// ready signals when the output holds "ready".
type ready struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan struct{}
	once sync.Once
}

func (r *ready) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf.Write(p)
	if bytes.Contains(r.buf.Bytes(), []byte("ready")) {
		r.once.Do(func() { close(r.seen) })
	}
	return len(p), nil
}

// during starts cmd, which prints "ready" and then waits, runs check
// while it waits, then kills it.
func during(t *testing.T, s backend.Session, cmd string, check func()) {
	t.Helper()
	r := &ready{seen: make(chan struct{})}
	p, err := s.Start(context.Background(), &backend.Call{Command: cmd, Output: r})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = p.Wait()
	}()
	select {
	case <-r.seen:
		check()
	case <-done:
		t.Errorf("the call ended before it was ready: %q", r.buf.String())
	case <-time.After(time.Minute):
		t.Error("the call did not get ready in a minute")
	}
	_ = p.Signal(syscall.SIGKILL)
	<-done
}

// cmdlinesWith lists the host processes whose argv holds s.
func cmdlinesWith(s string) []string {
	var found []string
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// TestNoSecretInHostArgv: while a call runs, no host process (bwrap,
// nsenter, the sandbox's own, which are host processes too) shows its
// command or an environment value in argv, which every user can read.
func TestNoSecretInHostArgv(t *testing.T) {
	b := newBackend(t)
	for _, caches := range []bool{false, true} {
		t.Run(fmt.Sprintf("caches=%v", caches), func(t *testing.T) {
			secret := "envsecret" + hex.EncodeToString(randBytes(8))
			canary := "cmdcanary" + hex.EncodeToString(randBytes(8))
			s := open(t, b, spec(t, []string{"SANDBASH_TEST_TOKEN=" + secret}, caches))
			during(t, s, fmt.Sprintf("x=%s; echo ready; sleep 300", canary), func() {
				for _, w := range []string{canary, secret} {
					if found := cmdlinesWith(w); len(found) > 0 {
						t.Errorf("%s is in the argv of host processes: %q", w, found)
					}
				}
			})
			// The value did reach the command.
			if _, out := run(t, s, `printf '%s' "$SANDBASH_TEST_TOKEN"`); out != secret {
				t.Errorf("SANDBASH_TEST_TOKEN in the sandbox: %q, want %q", out, secret)
			}
		})
	}
}

// TestHelpersIgnoreCallEnv: the call's environment reaches the command
// only. An LD_PRELOAD in it is loaded by bash in the sandbox, never by a
// program running on the host (the launcher, nsenter, bwrap).
func TestHelpersIgnoreCallEnv(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed (scripts/deps.sh bwrap installs it)")
	}
	b := newBackend(t)
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for _, caches := range []bool{false, true} {
		t.Run(fmt.Sprintf("caches=%v", caches), func(t *testing.T) {
			sp := spec(t, nil, caches)
			// The library and its marker file are in the workspace, so
			// the sandbox sees them at the same paths.
			marker := filepath.Join(sp.Workspace, "loaded-by")
			src := filepath.Join(sp.Workspace, "mark.c")
			lib := filepath.Join(sp.Workspace, "mark.so")
			code := `#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
	char line[512] = {0}, ns[256] = {0};
	int c = open("/proc/self/comm", O_RDONLY);
	if (c >= 0) { read(c, line, 64); close(c); }
	line[strcspn(line, "\n")] = 0;
	readlink("/proc/self/ns/mnt", ns, sizeof ns - 1);
	strcat(line, " "); strcat(line, ns); strcat(line, "\n");
	int fd = open(MARKER, O_WRONLY | O_APPEND | O_CREAT, 0666);
	if (fd >= 0) { write(fd, line, strlen(line)); close(fd); }
}
`
			if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", lib, fmt.Sprintf("-DMARKER=%q", marker), src).CombinedOutput(); err != nil {
				t.Fatalf("gcc: %v: %s", err, out)
			}
			if err := os.Chmod(sp.Workspace, 0o777); err != nil { // the marker is written as whoever loads the library
				t.Fatal(err)
			}
			sp.Env = append(sp.Env, "LD_PRELOAD="+lib, "LD_LIBRARY_PATH="+sp.Workspace)
			s := open(t, b, sp)
			if _, out := run(t, s, `echo "$LD_PRELOAD"`); out != lib+"\n" {
				t.Errorf("LD_PRELOAD in the sandbox: %q", out)
			}
			got, _ := os.ReadFile(marker)
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			sandboxed := 0
			for _, l := range lines {
				comm, ns, _ := strings.Cut(l, " ")
				switch {
				case ns == hostNS:
					t.Errorf("%s, on the host, loaded the call's LD_PRELOAD", comm)
				case comm == "bash":
					sandboxed++
				}
			}
			if sandboxed == 0 {
				t.Errorf("the sandbox's bash did not load the call's LD_PRELOAD (marker: %q); the test proves nothing", got)
			}
		})
	}
}

// TestInheritedFilesStayOut: a descriptor sandbash inherited without
// close-on-exec (Go closes none it did not open) does not reach the
// sandbox.
func TestInheritedFilesStayOut(t *testing.T) {
	b := newBackend(t)
	secret := "fdsecret" + hex.EncodeToString(randBytes(8))
	p := filepath.Join(t.TempDir(), "inherited")
	if err := os.WriteFile(p, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	low, err := unix.Open(p, unix.O_RDONLY, 0) // no O_CLOEXEC, like a leaked descriptor
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(low)
	// And one above every descriptor a call passes on (which would
	// replace a low one in the child).
	const high = 200
	if err := unix.Dup3(low, high, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(high)
	s := open(t, b, spec(t, nil, false))
	_, out := run(t, s, `for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -ge 3 ] && cat <&"$n" 2>/dev/null; done; echo end`)
	if strings.Contains(out, secret) {
		t.Errorf("the sandbox read a descriptor sandbash inherited (fd %d or %d): %q", low, high, out)
	}
}

// TestCallCgroups: where cgroups are in use, each call's processes are in
// a cgroup of its own with the default limits, removed when the call ends
// (the next call's may be there already, empty);
// the session's goes with Close, and what a dead sandbash left goes while
// a session is open (Open starts the sweep, Close waits for it).
func TestCallCgroups(t *testing.T) {
	b := newBackend(t)
	e := b.Enforcement()
	if e.Cgroups == "" && os.Geteuid() != 0 {
		// A user gets cgroups only where the host delegated one to it
		// (make test-user runs without): the limits say which they fall
		// back to, and why.
		if !strings.Contains(e.Summary, "rlimits only") || !strings.Contains(e.Summary, "cgroup") || e.Memory || e.Pids || e.CPU {
			t.Errorf("as uid %d without a delegated cgroup, the enforcement: %+v; want rlimits only, saying why no cgroup", os.Geteuid(), e)
		}
		return
	}
	if e.Cgroups == "" {
		t.Skipf("no cgroups here: %s", e.Summary)
	}
	roots := cgroupRoots()
	// A dead sandbash's leftovers: a session directory with a call in it.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%d.1.stale%s", dead.Process.Pid, hex.EncodeToString(randBytes(4)))
	for _, r := range roots {
		if err := os.MkdirAll(filepath.Join(r, stale, "call-1"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sp := spec(t, nil, false)
	s := open(t, b, sp)
	nap := fmt.Sprintf("3000.%d", time.Now().UnixNano()%1e9)
	def := backend.DefaultLimits()
	want := map[string]string{
		"memory.limit_in_bytes": strconv.FormatInt(def.Memory, 10), "memory.max": strconv.FormatInt(def.Memory, 10),
		"memory.memsw.limit_in_bytes": strconv.FormatInt(def.Memory, 10),
		"pids.max":                    strconv.FormatInt(def.Pids, 10),
		"cpu.cfs_quota_us":            strconv.FormatInt(int64(def.CPUs*100000), 10),
	}
	var runningCalls []string
	during(t, s, "sleep "+nap+" & echo ready; wait", func() {
		// The sleep was forked before "ready"; it may not have exec'd yet.
		var procs []string
		for end := time.Now().Add(10 * time.Second); len(procs) == 0 && time.Now().Before(end); {
			time.Sleep(10 * time.Millisecond)
			procs = cmdlinesWith(nap)
		}
		if len(procs) != 1 {
			t.Fatalf("the call's sleep on the host: %q", procs)
		}
		pid, _, _ := strings.Cut(procs[0], ":")
		for _, r := range roots {
			// The running call's, and perhaps the next call's, made
			// ahead, empty.
			calls, _ := filepath.Glob(filepath.Join(r, "*."+sp.ID, "call-*"))
			var running []string
			for _, c := range calls {
				in, _ := os.ReadFile(filepath.Join(c, "cgroup.procs"))
				switch {
				case strings.Contains("\n"+string(in), "\n"+pid+"\n"):
					running = append(running, c)
				case len(bytes.TrimSpace(in)) > 0:
					t.Errorf("another call's cgroup %s holds processes: %q", c, in)
				}
			}
			if len(running) != 1 || len(calls) > 2 {
				t.Errorf("cgroups under %s: %q, of which %q hold the call's sleep (pid %s); want it in one, and at most one more", r, calls, running, pid)
				continue
			}
			for file, v := range want {
				if got, err := os.ReadFile(filepath.Join(running[0], file)); err == nil && strings.TrimSpace(string(got)) != v {
					t.Errorf("%s/%s = %s, want %s", running[0], file, bytes.TrimSpace(got), v)
				}
			}
			runningCalls = append(runningCalls, running[0])
		}
		// The launcher was born in the call's cgroups from a thread of
		// sandbash's that stepped in for it: that thread is back out (else
		// the call's limits would count it, and its OOM kill could hit
		// sandbash).
		if in := threadsInSandbashCgroups(t); len(in) > 0 {
			t.Errorf("threads of sandbash in a call's cgroup during the call: %q", in)
		}
	})
	if in := threadsInSandbashCgroups(t); len(in) > 0 {
		t.Errorf("threads of sandbash in a call's cgroup after the call: %q", in)
	}
	for _, c := range runningCalls {
		if _, err := os.Stat(c); err == nil {
			t.Errorf("the call's cgroup %s remains after the call", c)
		}
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if left := cgroupLeftovers(t, sp.ID); len(left) > 0 {
		t.Errorf("session cgroups remain after Close: %q", left)
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, stale)); err == nil {
			t.Errorf("a dead sandbash's cgroup %s survived a session", filepath.Join(r, stale))
			os.Remove(filepath.Join(r, stale, "call-1"))
			os.Remove(filepath.Join(r, stale))
		}
	}
}

// threadsInSandbashCgroups lists this process's threads that are in a
// cgroup under a sandbash directory, with the cgroup.
func threadsInSandbashCgroups(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/cgroup")
	if err != nil || len(tasks) == 0 {
		t.Fatalf("listing this process's threads: %v", err)
	}
	var in []string
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "/sandbash/") || strings.HasSuffix(l, "/sandbash") {
				in = append(in, f+": "+l)
			}
		}
	}
	return in
}

// TestKilledAtOnceLeavesNothing: a call killed as soon as it started (a
// cancelled context, a session closed meanwhile) leaves no process
// behind, with or without cgroups: bwrap killed between creating the
// sandbox's first process and letting it go on would leave that process
// waiting forever. This process becomes a subreaper, so that such an
// orphan would be its child.
func TestKilledAtOnceLeavesNothing(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	for _, cgroups := range []bool{false, true} {
		b := newBackend(t, bwrap.WithCgroups(cgroups))
		s := open(t, b, spec(t, nil, false))
		for i := range 40 {
			p, err := s.Start(context.Background(), &backend.Call{Command: "sleep 60"})
			if err != nil {
				t.Fatal(err)
			}
			// At once, or a little later: bwrap's window is between
			// its clone and its status report, a few hundred µs in.
			time.Sleep(time.Duration(i%8) * 250 * time.Microsecond)
			_ = p.Signal(syscall.SIGKILL)
			_, _ = p.Wait()
		}
		if err := s.Close(); err != nil {
			t.Errorf("cgroups %v: Close: %v", cgroups, err)
		}
		// What is left is this process's child now; the sleep's bwrap
		// is gone at once, an orphan stays.
		var left []string
		for end := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			left = children(t, false)
			if len(left) == 0 || time.Now().After(end) {
				break
			}
		}
		if len(left) > 0 {
			t.Errorf("cgroups %v: calls killed at once left %q", cgroups, left)
			children(t, true)
		}
	}
}

// children lists this process's live child processes, and reaps the
// dead ones; with kill, it kills the live ones too.
func children(t *testing.T, kill bool) []string {
	t.Helper()
	var out []string
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(st, ')')
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(self) {
			continue
		}
		if f[0] == "Z" {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			continue
		}
		cmd, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(cmd, []byte{0}, []byte{' '})))
		if kill {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, 0, nil)
		}
	}
	return out
}

// TestDevBounded: /dev takes no files and /dev/shm at most half the
// memory limit, with or without cgroups.
func TestDevBounded(t *testing.T) {
	b := newBackend(t, bwrap.WithCgroups(false))
	s := open(t, b, spec(t, nil, false))
	_, out := run(t, s, `touch /dev/x 2>/dev/null && echo "dev writable"; echo x > /dev/null && echo null ok; stat -f -c '%b %S' /dev/shm`)
	var blocks, bsize int64
	rest, _ := strings.CutPrefix(out, "null ok\n")
	if _, err := fmt.Sscanf(rest, "%d %d", &blocks, &bsize); err != nil || !strings.HasPrefix(out, "null ok\n") {
		t.Fatalf("output %q", out)
	}
	if limit := backend.DefaultLimits().Memory / 2; blocks*bsize > limit {
		t.Errorf("/dev/shm holds %d bytes, want at most %d", blocks*bsize, limit)
	}
}

// TestProcessLimitPerCallWithoutCgroups: without cgroups, the process
// limit still counts the call's own processes (RLIMIT_NPROC set inside the
// sandbox's user namespace): the user's other processes neither use it up
// nor widen it.
func TestProcessLimitPerCallWithoutCgroups(t *testing.T) {
	l := backend.DefaultLimits()
	l.Pids = 64
	b := newBackend(t, bwrap.WithCgroups(false), bwrap.WithLimits(l))
	if !strings.Contains(b.Enforcement().Summary, "per namespace") {
		t.Skipf("this kernel counts RLIMIT_NPROC per user: %s", b.Enforcement().Summary)
	}
	sp := spec(t, nil, false)
	// 100 other processes of the sandbox's user on the host.
	var others []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range others {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	for range 100 {
		c := exec.Command("sleep", "300")
		if os.Getuid() == 0 {
			c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(sp.UID), Gid: uint32(sp.GID), Groups: []uint32{}}}
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		others = append(others, c)
	}
	s := open(t, b, sp)
	fork := func(n int) int {
		_, out := run(t, s, fmt.Sprintf(`sh -c 'i=0; while [ $i -lt %d ]; do sleep 60 & i=$((i+1)); echo $i > /tmp/n; done' 2>/dev/null; read n < /tmp/n; echo $n`, n))
		got, err := strconv.Atoi(strings.TrimSpace(out))
		if err != nil {
			t.Fatalf("output %q", out)
		}
		return got
	}
	if got := fork(40); got != 40 {
		t.Errorf("the call started %d of 40 processes beside 100 others of its user, under a limit of 64 per call", got)
	}
	if got := fork(100); got >= 64 {
		t.Errorf("the call started %d processes under a limit of 64", got)
	}
}

// TestNetworkOnLeavesHostMountsAlone: what gives a call its network
// (slirp4netns, which unmounts its old root) must not unmount anything of
// the host's. A shared mount with a submount stands for what container
// engines keep under /run and /var/lib: slirp4netns's own sandbox, run
// from the host's mount namespace, unmounted the submount.
func TestNetworkOnLeavesHostMountsAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		// As a user the network on is refused at Open, saying why.
		sp := spec(t, nil, false)
		sp.Network = backend.NetworkOn
		_, err := newBackend(t).Open(context.Background(), sp)
		if err == nil || !strings.Contains(err.Error(), "only as root") {
			t.Errorf("as uid %d, Open with the network on: %v; want a refusal saying it needs root", os.Geteuid(), err)
		}
		return
	}
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	for _, c := range [][]string{
		{"mount", "-t", "tmpfs", "sandbash-test", dir},
		{"mount", "--make-shared", dir},
		{"mkdir", sub},
		{"mount", "-t", "tmpfs", "sandbash-test-sub", sub},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", c, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-R", dir).Run() })
	b := newBackend(t)
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: t.TempDir(), Network: backend.NetworkOn})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Run(context.Background(), sandbash.Request{Command: "true"}); err != nil || r.ExitCode != 0 {
		t.Fatalf("a call with the network on: %v, %+v", err, r)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mounts), " "+sub+" ") {
		t.Errorf("after a call with the network on, the host's mount %s is gone", sub)
	}
}

// TestOneShot: a one-shot backend skips New's and Open's no-op sandboxes
// (unless a setting says bubblewrap may not work here: then New probes),
// runs calls as any other, and when bubblewrap cannot create a sandbox
// here at all, the call fails with New's explanation, as a setup error.
func TestOneShot(t *testing.T) {
	newBackend(t) // or skip
	ws := t.TempDir()
	b, err := bwrap.New(bwrap.WithOneShot(true))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: ws, ParentDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), sandbash.Request{Command: "echo one-shot"})
	if err != nil || r.ExitCode != 0 || r.Output != "one-shot\n" {
		t.Errorf("one-shot call: %+v, %v", r, err)
	}
	s.Close()

	// A "bwrap" that cannot create sandboxes, as on a host with user
	// namespaces off.
	fake := filepath.Join(t.TempDir(), "bwrap")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := bwrap.New(bwrap.WithPath(fake)); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("New with a bwrap that cannot sandbox: %v, want ErrUnavailable", err)
	}
	b, err = bwrap.New(bwrap.WithPath(fake), bwrap.WithOneShot(true))
	if bwrap.MayBeRestricted() {
		// A setting here says bubblewrap may not work: New finds out.
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "No permissions to create new namespace") {
			t.Errorf("one-shot New, where a setting may keep bubblewrap from sandboxing, with a bwrap that cannot: %v, want ErrUnavailable and bwrap's message", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("one-shot New probed: %v", err)
	}
	s, err = sandbash.Open(context.Background(), b, sandbash.Config{Workspace: ws, ParentDir: t.TempDir()})
	if err != nil {
		t.Fatalf("one-shot Open ran a sandbox: %v", err)
	}
	defer s.Close()
	_, err = s.Run(context.Background(), sandbash.Request{Command: "true"})
	if !errors.Is(err, backend.ErrSetup) || !strings.Contains(err.Error(), "cannot create a sandbox as uid") {
		t.Errorf("a call bwrap could not set up: %v; want ErrSetup and the probe's explanation", err)
	}
}
