package sandbash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/review"
	"github.com/sandbash/sandbash/workspace"
)

// WorkspaceMode says where a session's calls write the workspace.
type WorkspaceMode string

const (
	// WorkspaceDirect: calls write the host workspace itself (the
	// default; "" means this).
	WorkspaceDirect WorkspaceMode = "direct"
	// WorkspaceOverlay: the host workspace is the read-only lower layer of
	// an overlay, and every write of the session's calls lands in the
	// session's own layer, in its directory. The host workspace does not
	// change until the changes are applied (Session.Apply); Diff shows
	// them, Reset discards them, Checkpoint and Restore save and bring
	// back states of the layer.
	WorkspaceOverlay WorkspaceMode = "overlay"
)

// What a reviewed workspace's changes are (see package internal/review).
type (
	// Changes are what a session changed in its workspace; WritePatch
	// writes them as a unified diff in git's format, WriteStat one line
	// each.
	Changes = review.Changes
	// Change is one changed path.
	Change = review.Change
	// ApplyResult says what Apply wrote and what it refused, and why.
	ApplyResult = review.Result
	// Checkpoint is a saved state of the session's layer.
	Checkpoint = review.Checkpoint
)

var (
	// ErrNotOverlay is returned by Diff, Apply, Reset, Checkpoint and
	// Restore of a session whose workspace is in direct mode.
	ErrNotOverlay = errors.New("workspace not in overlay mode")
	// ErrBusy is returned by them while a call runs in the session.
	ErrBusy = errors.New("a call is running in the session")
	// ErrNoCheckpoint is returned by Restore for a name no checkpoint
	// has.
	ErrNoCheckpoint = review.ErrNoCheckpoint
)

// CheckWorkspaceMode refuses a mode Open would refuse.
func CheckWorkspaceMode(m WorkspaceMode) error {
	if m != "" && m != WorkspaceDirect && m != WorkspaceOverlay {
		return fmt.Errorf("sandbash: workspace mode %q: use %s or %s", m, WorkspaceDirect, WorkspaceOverlay)
	}
	return nil
}

// reviewDir is where a session keeps its workspace layers.
func reviewDir(dir string) string { return filepath.Join(dir, "review") }

// workspaceOverlay turns the workspace mount (mounts[0]) into an overlay
// whose lower layer is the host workspace and whose layers live in dir,
// created on first use. It refuses what overlay mode cannot show: a
// writable path overlapping the workspace (it would write the host
// directly), filesystems mounted inside the workspace (overlayfs shows
// the directory under them), a session directory inside it.
func workspaceOverlay(dir string, mounts []backend.Mount, uid, gid int) ([]backend.Mount, backend.Overlay, error) {
	ws := mounts[0]
	for _, m := range mounts[1:] {
		if !m.ReadOnly && (within(m.Target, ws.Target) || within(ws.Target, m.Target)) {
			return nil, backend.Overlay{}, fmt.Errorf("sandbash: the writable path %s overlaps the workspace %s, which is in overlay mode: writes there would reach the host without review. Drop it, or make it readable", m.Target, ws.Target)
		}
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil && within(real, ws.Source) {
		return nil, backend.Overlay{}, fmt.Errorf("sandbash: the session's directory %s lies inside the workspace %s, which overlay mode cannot layer over itself; keep sessions elsewhere (set TMPDIR, XDG_STATE_HOME or Config.ParentDir)", real, ws.Source)
	}
	subs, err := mountinfo.GetMounts(mountinfo.PrefixFilter(ws.Source))
	if err == nil {
		for _, m := range subs {
			if m.Mountpoint != ws.Source {
				return nil, backend.Overlay{}, fmt.Errorf("sandbash: %s is a mount inside the workspace %s; in overlay mode the sandbox would see the directory under it, not what is mounted there. Unmount it, use the direct workspace mode, or give a workspace without mounts inside", m.Mountpoint, ws.Source)
			}
		}
	}
	rdir := reviewDir(dir)
	if strings.ContainsAny(ws.Source+rdir, ",:") && os.Geteuid() != 0 {
		// As root the mount names staged paths; otherwise these.
		return nil, backend.Overlay{}, fmt.Errorf("sandbash: the workspace %s or the session's directory %s holds a comma or colon, which overlayfs mount options cannot carry; rename it, or use the direct workspace mode", ws.Source, rdir)
	}
	var l *review.Layer
	if review.Exists(rdir) {
		l, err = review.Open(rdir)
		if err == nil && l.Host() != ws.Source {
			err = fmt.Errorf("sandbash: the session's layers are over %s, not %s; open a new session", l.Host(), ws.Source)
		}
	} else {
		l, err = review.Create(rdir, ws.Source, uid, gid)
	}
	if err != nil {
		return nil, backend.Overlay{}, fmt.Errorf("sandbash: %w", err)
	}
	// bwrap mounts it here (overlay.Merged).
	if err := os.Mkdir(filepath.Join(rdir, "merged"), 0o700); err != nil && !os.IsExist(err) {
		return nil, backend.Overlay{}, fmt.Errorf("sandbash: %w", err)
	}
	o := backend.Overlay{Name: "workspace", Lower: ws.Source, Upper: l.Upper(), Work: l.Work(), Layers: l.Stack(), Target: ws.Target, Workspace: true}
	return mounts[1:], o, nil
}

// withoutLayers is what an earlier open sealed, less the workspace's
// layers: checkpoints and restores replace them, as they must.
func withoutLayers(sealed *workspace.Sealed, dir string) *workspace.Sealed {
	if sealed == nil {
		return nil
	}
	rdirs := []string{reviewDir(dir)}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		rdirs = append(rdirs, reviewDir(real))
	}
	out := &workspace.Sealed{Mounts: sealed.Mounts, Identities: map[string]backend.FileID{}}
	for p, id := range sealed.Identities {
		if !slices.ContainsFunc(rdirs, func(r string) bool { return within(p, r) }) {
			out.Identities[p] = id
		}
	}
	return out
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// layer opens the session's workspace layers.
func (s *Session) layer() (*review.Layer, error) {
	if s.cfg.WorkspaceMode != WorkspaceOverlay {
		return nil, fmt.Errorf("sandbash: the session's workspace is in direct mode: its calls wrote the host workspace, and there is nothing to review. Open the session with the workspace mode overlay: %w", ErrNotOverlay)
	}
	l, err := review.Open(reviewDir(s.dir))
	if err == nil && l.Host() != s.wsHost {
		err = fmt.Errorf("sandbash: the session's layers name %s as their workspace, not this session's; close the session", l.Host())
	}
	return l, err
}

// quiet holds the session's layers for one review operation: it fails
// with ErrBusy while a call runs, and calls wait until it is done.
func (s *Session) quiet() (func(), error) {
	if !s.review.TryLock() {
		return nil, fmt.Errorf("sandbash: %w; try again when it has ended", ErrBusy)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		s.review.Unlock()
		return nil, fmt.Errorf("sandbash: %w", ErrClosed)
	}
	return s.review.Unlock, nil
}

// Diff says what the session changed in its workspace (within paths, if
// given; relative to the workspace). It reads the session's layers, not
// the workspace, so its cost follows what changed.
func (s *Session) Diff(ctx context.Context, paths ...string) (*Changes, error) {
	l, err := s.layer()
	if err != nil {
		return nil, err
	}
	done, err := s.quiet()
	if err != nil {
		return nil, err
	}
	defer done()
	return l.Changes(paths...)
}

// Checkpoints lists the session's checkpoints, oldest first.
func (s *Session) Checkpoints() ([]Checkpoint, error) {
	l, err := s.layer()
	if err != nil {
		return nil, err
	}
	return l.Checkpoints(), nil
}

// Apply writes the session's changes (within paths, if given) into the
// host workspace and returns what it applied and what it refused: a file
// that changed on the host since the session opened, git's hooks and
// configuration, special files. What it applied leaves the diff.
func (s *Session) Apply(ctx context.Context, paths ...string) (*ApplyResult, error) {
	var res *ApplyResult
	err := s.change(ctx, func(l *review.Layer) (err error) {
		res, err = l.Apply(paths...)
		return err
	})
	return res, err
}

// Reset discards the session's changes (within paths, if given) and
// returns the paths it reset. Checkpoints stay.
func (s *Session) Reset(ctx context.Context, paths ...string) ([]string, error) {
	var done []string
	err := s.change(ctx, func(l *review.Layer) (err error) {
		done, err = l.Reset(paths...)
		return err
	})
	return done, err
}

// Checkpoint saves the session's layer as name (1 to 64 letters, digits,
// '.', '_', '-'), replacing a checkpoint of that name. It copies nothing.
func (s *Session) Checkpoint(ctx context.Context, name string) error {
	if err := review.CheckName(name); err != nil {
		return fmt.Errorf("sandbash: %w", err)
	}
	return s.change(ctx, func(l *review.Layer) error { return l.Checkpoint(name) })
}

// Restore brings the workspace as the session's calls see it back to the
// checkpoint name; what changed since is discarded.
func (s *Session) Restore(ctx context.Context, name string) error {
	return s.change(ctx, func(l *review.Layer) error { return l.Restore(name) })
}

// change runs fn on the layers with nothing mounted: overlayfs forbids
// changing a mounted layer, so the session's sandbox lets go of it (the
// bwrap holder ends, the container engine's volume goes with the warm
// containers) and opens again afterwards, with the new layers, checked
// as a later run of a CLI session is.
func (s *Session) change(ctx context.Context, fn func(*review.Layer) error) error {
	l, err := s.layer()
	if err != nil {
		return err
	}
	done, err := s.quiet()
	if err != nil {
		return err
	}
	defer done()
	if s.broken != nil {
		return s.broken
	}
	rerr := s.bs.Close()
	if s.stage != nil {
		rerr = errors.Join(rerr, s.stage.Close())
		s.stage = nil
	}
	if rerr != nil {
		s.broken = fmt.Errorf("sandbash: releasing the session's sandbox failed (%v); close the session", rerr)
		return s.broken
	}
	err = fn(l)
	cfg := s.cfg
	cfg.Dir, cfg.ID, cfg.Sealed, cfg.OutputDir = s.dir, s.id, s.sealed, s.outDir
	n, oerr := Open(context.WithoutCancel(ctx), s.b, cfg)
	if oerr != nil {
		s.broken = fmt.Errorf("sandbash: the session could not open its sandbox again after the change (%v); close it", oerr)
		return errors.Join(err, s.broken)
	}
	s.bs, s.stage, s.sealed = n.bs, n.stage, n.sealed
	if s.proxy != nil {
		// The new sandbox trusts the new proxy's CA (Open wrote it to
		// HOME): calls from now on go through that proxy.
		_ = s.proxy.Close()
	}
	s.proxy = n.proxy
	return err
}
