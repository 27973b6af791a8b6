package backendtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/workspace"
)

// spec builds a session spec as sandbash.Open would, sealed, for the
// tests that drive the backend directly, without the root package's
// timeouts, signals and bookkeeping in front of it.
func (f *fixture) spec(id string) *backend.SessionSpec {
	f.t.Helper()
	ws := f.dir("ws")
	spec := &backend.SessionSpec{
		ID:        id + marker()[6:14],
		Dir:       f.dir("session"),
		Workspace: ws,
		Mounts:    []backend.Mount{{Source: ws, Target: ws}},
		TmpDir:    f.dir("tmp"),
		HomeDir:   f.dir("home"),
		UID:       f.uid,
		GID:       f.gid,
		Env:       []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + backend.Home},
		Network:   backend.NetworkNone,
		Image:     f.caps.Image,
	}
	if rel, ok := strings.CutPrefix(ws, "/tmp/"); ok && os.Getuid() != 0 {
		// As sandbash.Open does for a user: the workspace's mount point
		// in the session's /tmp, else the engine makes it as root, where
		// the user cannot remove it.
		if err := os.MkdirAll(filepath.Join(spec.TmpDir, rel), 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := workspace.Seal(spec); err != nil {
		f.t.Fatalf("Seal: %v", err)
	}
	return spec
}

// testSessionContract checks backend.Session's own promises, with nothing
// of the root package in front: Close ends the calls still running (the
// root package also signals them, which would hide a backend that does
// not), a second Close is harmless, and Start after Close fails with
// backend.ErrClosed and runs nothing. (That Backend.Close can be called
// twice is checked for every subtest, when its fixture ends.)
func testSessionContract(f *fixture) {
	spec := f.spec("contract")
	s, err := f.b.Open(f.ctx, spec)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	m := marker()
	live := &liveWriter{want: "ready", seen: make(chan struct{})}
	p, err := s.Start(f.ctx, &backend.Call{Command: fmt.Sprintf("sh -c 'sleep 300; echo %s' & echo ready; sleep 300", m), Output: live})
	if err != nil {
		f.t.Fatalf("Start: %v", err)
	}
	type waited struct {
		exit backend.Exit
		err  error
	}
	done := make(chan waited, 1)
	go func() {
		exit, err := p.Wait()
		done <- waited{exit, err}
	}()
	select {
	case <-live.seen:
	case w := <-done:
		f.t.Fatalf("the call ended before it printed ready: %+v, %v", w.exit, w.err)
	case <-time.After(time.Minute):
		_ = p.Signal(9)
		f.t.Fatal("the call did not print ready within a minute")
	}
	closed = true
	if err := s.Close(); err != nil {
		f.t.Errorf("Close: %v", err)
	}
	select {
	case w := <-done:
		// Killed: what the sandbox reported (137), or that it reported
		// nothing; never a failure of another kind.
		if w.err == nil && w.exit.Code != 128+9 || w.err != nil && !errors.Is(w.err, backend.ErrNoExitStatus) {
			f.t.Errorf("Wait of the call Close ended: %+v, %v; want exit 137 or an error wrapping backend.ErrNoExitStatus", w.exit, w.err)
		}
	case <-time.After(time.Minute):
		_ = p.Signal(9)
		f.t.Fatal("Close returned, and the call it should have ended was still running a minute later")
	}
	if left := processesWith(m); len(left) > 0 {
		f.t.Errorf("processes outlived Close: %v", left)
	}
	if err := s.Close(); err != nil {
		f.t.Errorf("second Close: %v", err)
	}
	ran := filepath.Join(spec.Workspace, "ran-after-close")
	if p, err := s.Start(f.ctx, &backend.Call{Command: "touch " + ran}); !errors.Is(err, backend.ErrClosed) {
		f.t.Errorf("Start after Close: %v, want backend.ErrClosed", err)
		if err == nil {
			_, _ = p.Wait()
		}
	}
	if _, err := os.Stat(ran); err == nil {
		f.t.Error("a call started after Close ran")
	}
	if f.caps.Leftovers != nil {
		if left := f.caps.Leftovers(f.t, spec.ID); len(left) > 0 {
			f.t.Errorf("objects of the closed session remain: %v", left)
		}
	}
}
