package backendtest

import (
	"errors"
	"os"
	"strings"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
)

// Refusals are the promises a backend does not give, and refuses at Open
// rather than fake: each names words its refusal must contain (what it
// cannot do here, why, and what to do instead). The tests of a refused
// promise check that refusal instead of the promise; nothing skips. A nil
// entry: the backend gives the promise, and the suite checks it.
//
// A root-owned workspace needs no entry: where nothing is staged
// (backend.Unstaged), sandbash itself refuses it, and the suite checks
// that refusal wherever it would use one.
type Refusals struct {
	// Caches: copy-on-write caches (Config.Caches).
	Caches []string
	// Overlay: reviewable overlay workspaces (WorkspaceOverlay).
	Overlay []string
	// Egress: egress rules (Config.Egress).
	Egress []string
	// Submounts: a workspace (or readable or writable path) with other
	// mounts inside it.
	Submounts []string
}

// refused reports whether want names a refused promise (non-nil); if so,
// it checks that Open with cfg is refused, as unavailable or a setup
// failure, saying each of want.
func (f *fixture) refused(want []string, cfg sandbash.Config) bool {
	f.t.Helper()
	if want == nil {
		return false
	}
	if cfg.Workspace == "" {
		cfg.Workspace = f.dir("ws-refused")
	}
	if cfg.Image == "" {
		cfg.Image = f.caps.Image
	}
	s, err := sandbash.Open(f.ctx, f.b, cfg)
	if err == nil {
		s.Close()
		f.t.Fatalf("%s: Open accepted what the backend declares it refuses (%v)", f.b.Name(), want)
	}
	if !errors.Is(err, backend.ErrUnavailable) && !errors.Is(err, backend.ErrSetup) {
		f.t.Errorf("%s: the refusal %q is neither backend.ErrUnavailable nor backend.ErrSetup", f.b.Name(), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			f.t.Errorf("%s: the refusal %q does not say %q", f.b.Name(), err, w)
		}
	}
	return true
}

// unstaged is the backend's reason for staging nothing, "" where
// sandbash stages every mount (as root).
func (f *fixture) unstaged() string {
	if u, ok := f.b.(backend.Unstaged); ok {
		return u.Unstaged()
	}
	return ""
}

// rootRefused reports whether the backend stages nothing; if so, it checks
// that Open of ws, a workspace that belongs to root, is refused: nothing
// idmaps it, so its calls would run as root. The refusal says why and to
// chown the workspace.
func (f *fixture) rootRefused(ws string) bool {
	f.t.Helper()
	why := f.unstaged()
	if why == "" {
		return false
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chown(ws, 0, 0); err != nil {
		f.t.Fatal(err)
	}
	s, err := sandbash.Open(f.ctx, f.b, sandbash.Config{Workspace: ws, Image: f.caps.Image})
	if err == nil {
		s.Close()
		f.t.Fatalf("%s stages nothing (%s), yet Open accepted root's workspace %s", f.b.Name(), why, ws)
	}
	msg := err.Error()
	if !errors.Is(err, sandbash.ErrOtherOwner) || !strings.Contains(msg, why) || !strings.Contains(msg, "chown the workspace") {
		f.t.Errorf("Open of root's workspace %s where nothing is staged: %v; want ErrOtherOwner that says why (%q) and to chown the workspace", ws, err, why)
	}
	return true
}
