package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
)

// RequireEnv names the environment variable that lists the backends a test
// run demands (comma-separated, or "all"). CI sets it so that a backend that
// cannot run fails the run instead of skipping.
const RequireEnv = "SANDBASH_REQUIRE"

// Required reports whether this run demands backend name.
func Required(name string) bool {
	for _, r := range strings.Split(os.Getenv(RequireEnv), ",") {
		if r = strings.TrimSpace(r); r == name || r == "all" {
			return true
		}
	}
	return false
}

// Unavailable ends a test whose backend cannot run here: it skips, or fails
// when the run demands that backend (see RequireEnv).
func Unavailable(tb testing.TB, name string, err error) {
	tb.Helper()
	if Required(name) {
		tb.Fatalf("backend %s is required (%s=%s) but unavailable: %v", name, RequireEnv, os.Getenv(RequireEnv), err)
	}
	tb.Skipf("backend %s unavailable (set %s=%s to make this a failure): %v", name, RequireEnv, name, err)
}

// watchdog bounds a subtest: past limit it fails the test and cancels the
// context its calls run under; if the test is still stuck 30 s later, it
// panics so the run ends with every goroutine's stack instead of hanging.
func watchdog(t *testing.T, limit time.Duration) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	done := false
	var last *time.Timer
	first := time.AfterFunc(limit, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		t.Errorf("watchdog: %s still running after %v; cancelling its calls", t.Name(), limit)
		cancel()
		last = time.AfterFunc(30*time.Second, func() {
			debug.SetTraceback("all")
			panic("backendtest: " + t.Name() + " hung even after its calls were cancelled")
		})
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		done = true
		first.Stop()
		if last != nil {
			last.Stop()
		}
		cancel()
	})
	return ctx
}

// fixture is one subtest's world: a backend, a directory tree every sandbox
// user can traverse, and the uid that owns the workspace.
type fixture struct {
	t    *testing.T
	ctx  context.Context
	b    backend.Backend
	caps Capabilities
	base string
	uid  int
	gid  int
	// probes builds the seccomp probe (hardening.go), once per Run.
	probes *probes
}

// testOwner is the workspace owner when the suite runs as root: not root,
// so the owner test proves calls run as the owner rather than as the caller.
const testOwner = 4242

func newFixture(t *testing.T, factory Factory, caps Capabilities) *fixture {
	t.Helper()
	ctx := watchdog(t, 8*time.Minute)
	base, err := os.MkdirTemp("", "sbsuite-")
	t.Cleanup(func() { os.RemoveAll(base) })
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	b := factory(t)
	t.Cleanup(func() {
		// After the sessions' own cleanups, registered later.
		for i := range 2 {
			if err := b.Close(); err != nil {
				t.Errorf("Backend.Close (%d): %v", i+1, err)
			}
		}
	})
	f := &fixture{t: t, ctx: ctx, b: b, caps: caps, base: base, uid: os.Getuid(), gid: os.Getgid()}
	if f.uid == 0 {
		f.uid, f.gid = testOwner, testOwner
	}
	return f
}

// dir creates a directory under the fixture's base, owned by the workspace
// owner and readable by everyone.
func (f *fixture) dir(name string) string {
	f.t.Helper()
	d := filepath.Join(f.base, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(d, f.uid, f.gid); err != nil {
			f.t.Fatal(err)
		}
	}
	return d
}

// open opens a session with cfg, defaulting the workspace and image; it is
// closed when the test ends.
func (f *fixture) open(cfg sandbash.Config) *sandbash.Session {
	f.t.Helper()
	if cfg.Workspace == "" {
		cfg.Workspace = f.dir("ws")
	}
	if cfg.Image == "" {
		cfg.Image = f.caps.Image
	}
	s, err := sandbash.Open(f.ctx, f.b, cfg)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.t.Cleanup(func() {
		if err := s.Close(); err != nil {
			f.t.Errorf("Close: %v", err)
		}
	})
	return s
}

// run runs cmd and fails the test if the call could not run.
func (f *fixture) run(s *sandbash.Session, cmd string) *sandbash.Result {
	f.t.Helper()
	r, err := s.Run(f.ctx, sandbash.Request{Command: cmd})
	if err != nil {
		f.t.Fatalf("Run(%q): %v", cmd, err)
	}
	return r
}

// expect runs cmd and checks its exit status and output.
func (f *fixture) expect(s *sandbash.Session, cmd string, code int, out string) {
	f.t.Helper()
	r := f.run(s, cmd)
	if r.ExitCode != code || r.Output != out {
		f.t.Errorf("%q: exit %d, output %q; want exit %d, output %q", cmd, r.ExitCode, r.Output, code, out)
	}
}

func marker() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "sbmark" + hex.EncodeToString(b)
}

// processesWith lists the host processes whose command line contains s.
// Sandboxes here run on this host, so their processes appear in /proc.
func processesWith(s string) []string {
	var found []string
	self := strconv.Itoa(os.Getpid())
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), s) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// liveWriter signals when a marker line appears in the output.
type liveWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *liveWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// startLong starts cmd in s, which must print "started" and then keep
// running, and waits until it has; stop cancels the call and waits for it.
func (f *fixture) startLong(s *sandbash.Session, cmd string) (stop func()) {
	f.t.Helper()
	live := &liveWriter{want: "started\n", seen: make(chan struct{})}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, sandbash.Request{Command: cmd, Live: live})
		done <- err
	}()
	stop = func() {
		cancel()
		<-done
	}
	select {
	case <-live.seen:
	case err := <-done:
		cancel()
		f.t.Fatalf("the call ended before it started: %v (%q)", err, live.buf.String())
	case <-time.After(time.Minute):
		stop()
		f.t.Fatal("the call did not start within a minute")
	}
	return stop
}
