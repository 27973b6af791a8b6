// Package sandbash runs AI agents' shell commands in throw-away sandboxes.
//
// A [Session] holds one workspace open on one backend (bubblewrap, Docker or
// Podman; see package backend). Each [Session.Run] is one call: `bash -c
// <command>`, started fresh at the workspace root with stdin at /dev/null, its
// stdout and stderr merged into one stream in write order. Nothing of a call
// survives it: background processes end when its main command exits. Only the
// session's /tmp and HOME persist between calls, and they are removed when
// the session closes.
//
//	b, err := bwrap.New()
//	s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: "/home/me/project"})
//	defer s.Close()
//	res, err := s.Run(ctx, sandbash.Request{Command: "go test ./..."})
//	fmt.Print(res.Observation())
//
// # What a call gets
//
//   - The workspace read-write at its host path, owned files stay the
//     workspace owner's; extra readable (read-only) and writable paths; never
//     a container control socket (package workspace).
//   - A minimal environment: PATH, HOME (a per-session directory at
//     /home/sandbash), LANG=C.UTF-8, TERM=dumb, plus the names the session
//     passes through explicitly, never one that changes how bash or the
//     dynamic linker start (PATH, BASH_ENV, LD_*, ...: see [CheckEnv]).
//     Nothing else: not this process's environment, not a container
//     image's ENV.
//   - A timeout (default 2 minutes, 1 s to 10 minutes): on expiry every process
//     of the call gets SIGTERM, then SIGKILL 5 s later; the partial output is
//     kept. Cancelling the context kills the call at once.
//   - Bounded output: the first and last 15 KiB are rendered; output longer
//     than those 30 KiB is written whole to a spill file in the session's
//     output directory (capped at 64 MiB by default).
package sandbash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/egress"
	"github.com/sandbash/sandbash/internal/hostmount"
	"github.com/sandbash/sandbash/internal/output"
	"github.com/sandbash/sandbash/internal/owner"
	"github.com/sandbash/sandbash/internal/rmtree"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// Limits and defaults.
const (
	DefaultTimeout         = 120 * time.Second
	MinTimeout             = 1 * time.Second
	MaxTimeout             = 600 * time.Second
	DefaultKillGrace       = 5 * time.Second
	DefaultMaxCommandBytes = 64 << 10

	// deadlineMargin: a sandbox that supervises itself ends a call this
	// long after sandbash's own SIGKILL was due (see backend.Call.Deadline).
	deadlineMargin = 2 * time.Second
)

// Config describes a session. The zero value of every field but Workspace
// is usable.
type Config struct {
	// Workspace is the project directory: mounted read-write at its own
	// path, and the working directory of every call. Required.
	Workspace string
	// Readable paths are mounted read-only, Writable paths read-write, each
	// at its own path.
	Readable, Writable []string
	// Network is the network policy; "" means backend.NetworkNone.
	Network Network
	// Env passes variables into the sandbox: "NAME" copies NAME from this
	// process's environment (it must be set), "NAME=VALUE" sets it. Nothing
	// else from this process's environment enters the sandbox. Names that
	// change how bash or the dynamic linker start are refused with
	// ErrUnsafeEnv (see CheckEnv).
	Env []string
	// Image is the container image, for container backends.
	Image string
	// OutputDir is where spill files go. Empty means a directory inside the
	// session's own directory, removed with the session; a directory given
	// here is kept (and must exist).
	OutputDir string
	// SpillLimit caps each spill file; 0 means 64 MiB.
	SpillLimit int64
	// MaxCommandBytes refuses longer commands; 0 means 64 KiB.
	MaxCommandBytes int
	// Confirm, if set, is asked before every call runs; a "no" refuses it.
	Confirm Confirmer
	// ParentDir is where a fresh session directory is made when Dir is
	// empty (default: os.TempDir()). That directory is removed by Close; it
	// names the process that owns it, so that [SweepDirs] can remove those
	// a killed process left.
	ParentDir string
	// Dir, if set, is the session's directory, kept when it closes: a
	// later Open with the same Dir (and ID) finds the same /tmp, HOME and
	// cache layers. Remove it with RemoveDir. Empty means a fresh temporary
	// directory, removed by Close. Two sessions must never have one Dir open
	// at once (their cache layers would get two live mounts): serialise.
	Dir string
	// ID names the session (labels on containers, spill file names); empty
	// means a random one.
	ID string
	// Caches are mounted copy-on-write (see package overlay): the host
	// directory is read-only, the session's writes go to its own layer,
	// kept across its calls and discarded when it closes.
	Caches []Cache
	// Egress, with allow rules, limits the calls' network to the
	// destinations they allow, through sandbash's egress proxy (Network
	// must then be none or "").
	Egress *Egress
	// Sealed, if set, is what an earlier Open of this session recorded
	// (Session.Sealed): Open refuses if a path it mounts now leads
	// elsewhere. For sessions reopened by another process.
	Sealed *workspace.Sealed
	// WorkspaceMode is where calls write the workspace: "" or
	// WorkspaceDirect, the host's; WorkspaceOverlay, the session's own
	// layer, until Session.Apply (see review.go).
	WorkspaceMode WorkspaceMode
}

// Confirmer approves commands before they run. Show the user
// [EscapeCommand] of the command, never the raw text: control bytes in it
// could otherwise hide what runs.
type Confirmer interface {
	Confirm(ctx context.Context, command string) (bool, error)
}

// Request is one call.
type Request struct {
	// Command is run as `bash -c Command`.
	Command string
	// Timeout bounds the call; 0 means DefaultTimeout. Outside
	// [MinTimeout, MaxTimeout] the call is refused.
	Timeout time.Duration
	// KillGrace is how long after SIGTERM the call gets SIGKILL; 0 means
	// DefaultKillGrace.
	KillGrace time.Duration
	// Live, if set, receives the output as it is produced (write errors are
	// ignored: the captured result is unaffected).
	Live io.Writer
}

// Session is an open sandbox session. Its methods are safe for concurrent
// use; calls in one session run side by side.
type Session struct {
	id      string
	backend string
	cfg     Config
	dir     string
	outDir  string
	bs      backend.Session
	stage   *hostmount.Stage // pinned (and perhaps idmapped) mounts, when root
	proxy   *egress.Proxy    // the egress proxy, under egress rules
	sealed  *workspace.Sealed

	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	calls   sync.WaitGroup
	seq     int

	// review: calls hold it shared, a change to the workspace's layers
	// (overlay mode) exclusively; b reopens the sandbox after one, and
	// broken says why that failed.
	review sync.RWMutex
	b      backend.Backend
	broken error
	wsHost string // the host workspace under the overlay
}

// Open opens a session on b. It checks every path against the mount policy,
// creates the session's /tmp and HOME and prepares the sandbox; on error
// nothing is left behind.
func Open(ctx context.Context, b backend.Backend, cfg Config) (*Session, error) {
	if cfg.Network == "" {
		cfg.Network = backend.NetworkNone
	}
	if err := CheckNetwork(cfg.Network); err != nil {
		return nil, err
	}
	if err := CheckWorkspaceMode(cfg.WorkspaceMode); err != nil {
		return nil, err
	}
	env, err := buildEnv(append(overlay.Env(cfg.Caches), cfg.Env...), os.LookupEnv)
	if err != nil {
		return nil, err
	}
	mounts, err := workspace.Resolve(workspace.Config{Root: cfg.Workspace, Readable: cfg.Readable, Writable: cfg.Writable})
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Caches {
		if h, aerr := filepath.Abs(c.Host); c.Host != "" && aerr == nil {
			if err := workspace.CheckPlanted(h, mounts); err != nil {
				return nil, fmt.Errorf("sandbash: cache %s: %w", c.Name, err)
			}
		}
	}
	uid, gid, err := workspace.Owner(mounts[0].Source)
	if err != nil {
		return nil, err
	}
	if u, ok := b.(interface{ Unstaged() string }); os.Geteuid() == 0 && (uid == 0 || gid == 0) && !(ok && u.Unstaged() != "") {
		// stageMounts will idmap: its user namespace is made meanwhile.
		hostmount.Prepare(idmapFor(uid, gid))
	}
	if uid != os.Getuid() && os.Geteuid() != 0 && b.Name() != "bwrap" {
		// A container engine runs the calls as the workspace owner; only
		// root could hand them a private /tmp and HOME.
		return nil, fmt.Errorf("sandbash: the workspace %s belongs to uid %d and sandbash runs as uid %d, not root: calls run as the workspace owner, and only root can give them a /tmp and HOME that no other user can reach (and map a root-owned workspace so that no call runs as root); run sandbash as uid %d, or as root: %w",
			cfg.Workspace, uid, os.Getuid(), uid, ErrOtherOwner)
	}
	if cfg.OutputDir != "" {
		if fi, err := os.Stat(cfg.OutputDir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sandbash: output directory %s does not exist; create it or leave it unset", cfg.OutputDir)
		}
	}
	id := cfg.ID
	if id == "" {
		id = newID()
	} else if !validID(id) {
		return nil, fmt.Errorf("sandbash: session ID %q: use 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit (it names files and containers)", id)
	}
	policy, err := checkEgress(cfg.Egress, cfg.Network, id)
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if cfg.ParentDir != "" {
			err = os.MkdirAll(cfg.ParentDir, 0o700)
		}
		if err == nil {
			dir, err = os.MkdirTemp(cfg.ParentDir, "sandbash-"+id+"-")
		}
		if err == nil {
			err = owner.Mark(dir)
		}
	} else {
		err = os.MkdirAll(dir, 0o700)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbash: creating the session directory: %w", err)
	}
	s := &Session{id: id, backend: b.Name(), cfg: cfg, dir: dir, outDir: cfg.OutputDir, closing: make(chan struct{}), b: b}
	fail := func(err error) (*Session, error) {
		if s.proxy != nil {
			s.proxy.Close()
		}
		if cfg.Dir == "" {
			_ = removeAll(dir)
		}
		return nil, err
	}
	// The session directory is traversable so a sandbox running as the
	// workspace owner reaches its /tmp and HOME; those two are its own.
	if err := os.Chmod(dir, 0o711); err != nil {
		return fail(err)
	}
	for _, sub := range []string{"tmp", "home"} {
		if err := makeOwnedDir(filepath.Join(dir, sub), uid, gid); err != nil {
			return fail(fmt.Errorf("sandbash: creating the session %s: %w", sub, err))
		}
	}
	if s.outDir == "" {
		s.outDir = filepath.Join(dir, "output")
		if err := os.Mkdir(s.outDir, 0o700); err != nil && !os.IsExist(err) {
			return fail(err)
		}
	}
	overlays, err := overlay.Prepare(dir, cfg.Caches, uid, gid)
	if err != nil {
		return fail(err)
	}
	network := cfg.Network
	if policy != nil {
		var penv []string
		if s.proxy, penv, err = startEgress(policy, filepath.Join(dir, "home")); err != nil {
			return fail(err)
		}
		env = append(env, penv...)
		network = backend.NetworkProxy
	}
	wsTarget := mounts[0].Target
	if cfg.WorkspaceMode == WorkspaceOverlay {
		var o backend.Overlay
		s.wsHost = mounts[0].Source
		if mounts, o, err = workspaceOverlay(dir, mounts, uid, gid); err != nil {
			return fail(err)
		}
		overlays = append(overlays, o)
	}
	spec := &backend.SessionSpec{
		ID:        id,
		Workspace: wsTarget,
		Mounts:    mounts,
		TmpDir:    filepath.Join(dir, "tmp"),
		HomeDir:   filepath.Join(dir, "home"),
		Dir:       dir,
		UID:       uid,
		GID:       gid,
		Env:       env,
		Network:   network,
		Image:     cfg.Image,
		Overlays:  overlays,
	}
	// Hold every mount in place, hide host sockets, protect .git, and
	// record what each host path is (see package workspace).
	if err := workspace.Seal(spec); err != nil {
		return fail(err)
	}
	if err := workspace.Compare(withoutLayers(cfg.Sealed, dir), spec); err != nil {
		return fail(err)
	}
	s.sealed = &workspace.Sealed{Mounts: slices.Clone(spec.Mounts), Identities: maps.Clone(spec.Identities)}
	if os.Geteuid() != 0 {
		makeMountPoints(spec)
	}
	if u, ok := b.(backend.Unstaged); ok && u.Unstaged() != "" {
		// Nothing is staged (see README, "Inside a devcontainer"), so
		// nothing is idmapped either: a root-owned workspace's calls
		// would run as root.
		if spec.UID == 0 || spec.GID == 0 {
			return fail(fmt.Errorf("sandbash: the workspace %s belongs to root, and %s, so sandbash cannot map it to uid %d through a staged mount and its calls would run as root; chown the workspace (on the host) to a non-root user: %w",
				cfg.Workspace, u.Unstaged(), backend.SandboxUID, ErrOtherOwner))
		}
	} else if os.Geteuid() == 0 {
		stage, err := stageMounts(id, spec)
		if err != nil {
			return fail(err)
		}
		s.stage = stage
	}
	bs, err := b.Open(ctx, spec)
	if err != nil {
		if s.stage != nil {
			_ = s.stage.Close()
		}
		return fail(err)
	}
	s.bs = bs
	return s, nil
}

// stageMounts pins every host path of spec (see package
// internal/hostmount): each is cloned now, from what was checked, and the
// backend binds the clone. When the workspace belongs to root, the clones
// are idmapped and the calls run as backend.SandboxUID:SandboxGID, so that
// no call holds host root while its files still belong to root.
func stageMounts(id string, spec *backend.SessionSpec) (*hostmount.Stage, error) {
	var idmap *hostmount.IDMap
	if spec.UID == 0 || spec.GID == 0 {
		m := idmapFor(spec.UID, spec.GID)
		idmap = &m
		if spec.UID == 0 {
			spec.UID = backend.SandboxUID
		}
		if spec.GID == 0 {
			spec.GID = backend.SandboxGID
		}
	}
	stage, err := hostmount.New(id, spec.GID, owner.Gone, idmap)
	if err != nil {
		return nil, fmt.Errorf("sandbash: %w", err)
	}
	// Read-only paths outside the writable ones keep their ids: the call
	// reads them as the user it runs as, so root's private files stay
	// private. What it writes to is
	// mapped, and so are the caches' layers (their files are the owner's).
	// A staged path is the same file as the one it was cloned from: it
	// keeps the identity Seal recorded, which backends verify. what
	// says, when a path cannot be idmapped, what to do about it.
	const (
		yours   = "chown the workspace to a non-root user"
		session = "the session directory must be on a filesystem that has them (ext4, xfs, btrfs, tmpfs; not overlayfs, as in a container): set XDG_STATE_HOME (the CLI) or Config.ParentDir elsewhere, or " + yours
	)
	add := func(p *string, ro, mapIDs bool, what string) {
		if err != nil {
			return
		}
		old := *p
		*p, err = stage.Add(old, ro, mapIDs)
		if errors.Is(err, hostmount.ErrNoIdmap) {
			err = fmt.Errorf("%w; %s", err, what)
		} else if err == nil {
			if id, ok := spec.Identities[old]; ok {
				spec.Identities[*p] = id
			}
		}
	}
	// Add refuses any symlink on the way: the mount sources were resolved
	// by the policy check, which a symlink now would undo; the session's
	// own directories are resolved here.
	own := func(p *string, ro, mapIDs bool, what string) {
		if err == nil {
			*p, err = filepath.EvalSymlinks(*p)
		}
		add(p, ro, mapIDs, what)
	}
	// A read-only mount inside a writable one (what Seal protects there:
	// .git's hooks and config, a worktree's .git file) is mapped like it,
	// so that it belongs to the call's user as what is around it does (git
	// refuses a .git file of another's); it grants nothing the writable
	// mount would not.
	inWritable := func(p string) bool {
		for _, m := range spec.Mounts {
			if !m.ReadOnly && m.Source != p && strings.HasPrefix(p, m.Source+"/") {
				return true
			}
		}
		return false
	}
	mapped := make([]bool, len(spec.Mounts))
	for i, m := range spec.Mounts {
		mapped[i] = !m.ReadOnly || inWritable(m.Source)
	}
	for i := range spec.Mounts {
		add(&spec.Mounts[i].Source, spec.Mounts[i].ReadOnly, mapped[i], yours)
	}
	own(&spec.TmpDir, false, true, session)
	own(&spec.HomeDir, false, true, session)
	for i := range spec.Overlays {
		o := &spec.Overlays[i]
		// The upper and work directories share one parent, and overlayfs
		// needs them on one mount.
		parent := filepath.Dir(o.Upper)
		if filepath.Dir(o.Work) != parent {
			err = errors.Join(err, fmt.Errorf("sandbash: cache %s: upper and work directories in different places", o.Name))
		}
		staged := parent
		lowerWhat := "leave out the cache " + o.Name + ", or " + yours
		if o.Workspace {
			lowerWhat = yours
		}
		own(&o.Lower, true, true, lowerWhat)
		own(&staged, false, true, session)
		if err == nil {
			// A workspace's frozen layers lie under the same parent.
			o.Layers = slices.Clone(o.Layers)
			layers := make([]*string, len(o.Layers))
			for j := range o.Layers {
				layers[j] = &o.Layers[j]
			}
			for _, p := range append([]*string{&o.Upper, &o.Work}, layers...) {
				moved := filepath.Join(staged, strings.TrimPrefix(*p, parent+"/"))
				if id, ok := spec.Identities[*p]; ok {
					spec.Identities[moved] = id
				}
				*p = moved
			}
		}
	}
	if errors.Is(err, unix.EPERM) {
		err = fmt.Errorf("%w; sandbash as root pins every mount of a session (open_tree and mount_setattr), which needs CAP_SYS_ADMIN in the host's mount namespace, and this process lacks it (in a container? start it with --cap-add SYS_ADMIN, run sandbash there as a normal user, or use the Docker or Podman backend through the host's engine)", err)
	}
	if err != nil {
		_ = stage.Close()
		return nil, fmt.Errorf("sandbash: %w", err)
	}
	return stage, nil
}

// Prepare starts, in the background, what an Open of a session on the
// workspace dir will need and can be made ahead: as root, the user
// namespace that idmaps a root-owned workspace. It returns at once, and
// Open never needs it: the CLI calls it first thing.
func Prepare(dir string) {
	if os.Geteuid() != 0 {
		return
	}
	if uid, gid, err := workspace.Owner(dir); err == nil && (uid == 0 || gid == 0) {
		hostmount.Prepare(idmapFor(uid, gid))
	}
}

// idmapFor is the idmapping of a workspace owned by uid:gid: root's ids
// become backend.SandboxUID and SandboxGID.
func idmapFor(uid, gid int) hostmount.IDMap {
	var m hostmount.IDMap
	if uid == 0 {
		m.UID = backend.SandboxUID
	}
	if gid == 0 {
		m.GID = backend.SandboxGID
	}
	return m
}

// Sealed is what the session mounts and what those host paths led to when
// it opened; give it to a later Open of the same session (Config.Sealed).
func (s *Session) Sealed() *workspace.Sealed { return s.sealed }

// makeOwnedDir creates dir, private to the sandbox user: as root it hands
// it over; otherwise the calls run as this process (bwrap), and it is
// this process's own.
func makeOwnedDir(dir string, uid, gid int) error {
	if err := os.Mkdir(dir, 0o700); os.IsExist(err) {
		return nil // a kept session's directory, already set up
	} else if err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		return os.Chown(dir, uid, gid)
	}
	return nil
}

// SweepDirs removes the session directories under parent (see
// Config.ParentDir; os.TempDir() when it is "", the default) that sandbash
// processes of this user left when they died, and returns what it
// removed. Directories of live processes are left alone, and so is
// anything not named as a session directory or not marked by this user.
func SweepDirs(parent string) ([]string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	return sweepDirs(parent, func(o string) bool { return owner.Collectable(o, false) })
}

// sweepDirs holds parent open and reaches its entries through that
// descriptor, so that the directory whose mark is checked is the one
// removed: a parent another user can write ($TMPDIR under sudo -E or su,
// pam_tmpdir's /tmp/user/UID) could otherwise be replaced by a symlink in
// between, and the removal of the same name would happen where it leads.
func sweepDirs(parent string, collect func(owner string) bool) ([]string, error) {
	d, err := os.Open(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	defer d.Close()
	held := fmt.Sprintf("/proc/self/fd/%d", d.Fd())
	named := func(p string) string { return filepath.Join(parent, strings.TrimPrefix(p, held)) }
	removed, err := owner.SweepDirs(held, "sandbash-", collect, func(dir string) error {
		err := removeAll(dir)
		if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
			pe.Path = named(pe.Path)
		}
		return err
	})
	for i, r := range removed {
		removed[i] = named(r)
	}
	return removed, err
}

// ID is the session's id; backends label what they create with it.
func (s *Session) ID() string { return s.id }

// Backend is the name of the session's backend.
func (s *Session) Backend() string { return s.backend }

// WaitWarm waits until the next call will start without waiting for a
// sandbox to be prepared. Backends that prepare nothing ahead return at once.
func (s *Session) WaitWarm(ctx context.Context) error {
	s.review.RLock()
	defer s.review.RUnlock()
	if w, ok := s.bs.(backend.Warmer); ok {
		return w.WaitWarm(ctx)
	}
	return nil
}

// Dir is the session's own directory on the host: its /tmp, HOME, cache
// layers and (by default) spill files. Close removes it, unless it was
// given as Config.Dir (a kept session's: see RemoveDir).
func (s *Session) Dir() string { return s.dir }

// OutputDir is where this session's spill files go.
func (s *Session) OutputDir() string { return s.outDir }

// Run runs one call. Refused requests (see the Err variables) return an
// error and run nothing. Otherwise the Result describes the call, including
// a timeout or a non-zero exit; when ctx is cancelled mid-call, Run returns
// the partial Result together with ctx's error.
func (s *Session) Run(ctx context.Context, req Request) (*Result, error) {
	if err := s.check(req); err != nil {
		return nil, err
	}
	if req.Timeout == 0 {
		req.Timeout = DefaultTimeout
	}
	if req.KillGrace == 0 {
		req.KillGrace = DefaultKillGrace
	}
	if s.cfg.Confirm != nil {
		ok, err := s.cfg.Confirm.Confirm(ctx, req.Command)
		if err != nil {
			return nil, fmt.Errorf("sandbash: confirmation: %w", err)
		}
		if !ok {
			return nil, fmt.Errorf("sandbash: the command was not run: %w", ErrDeclined)
		}
	}
	// A change to the workspace's layers under way finishes first.
	s.review.RLock()
	defer s.review.RUnlock()
	if s.broken != nil {
		return nil, s.broken
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbash: %w; open a new session", ErrClosed)
	}
	s.seq++
	seq := s.seq
	name := fmt.Sprintf("%s-call-%04d.out", s.id, seq)
	s.calls.Add(1)
	s.mu.Unlock()
	defer s.calls.Done()

	capture := output.New(output.Options{Dir: s.outDir, Name: name, SpillLimit: s.cfg.SpillLimit})
	var w io.Writer = capture
	if req.Live != nil {
		w = io.MultiWriter(capture, ignoreErrors{req.Live})
	}
	start := time.Now()
	// The sandbox's own deadline comes after sandbash's timeout and kill,
	// which normally end the call first.
	deadline := req.Timeout + req.KillGrace + deadlineMargin
	ec, serve := egressCall(s.proxy, seq)
	p, err := s.bs.Start(ctx, &backend.Call{Command: req.Command, Output: w, Deadline: deadline, KillGrace: req.KillGrace, Proxy: serve})
	if err != nil {
		if ec != nil {
			ec.Close()
		}
		return nil, fmt.Errorf("sandbash: %s: starting the call: %w", s.backend, err)
	}
	sup := supervise(ctx, p, req, s.closing)
	exit, werr := p.Wait()
	outcome := sup.stop()
	var denied []string
	var omitted int
	if ec != nil {
		ec.Close()
		denied, omitted = ec.Denied(), ec.DeniedOmitted()
	}
	_ = capture.Close()
	if errors.Is(werr, backend.ErrNoExitStatus) && (outcome.killed || exit.OOMKilled) {
		// No status, because a SIGKILL (sandbash's, or the memory
		// limit's) ended the call before its sandbox could report one:
		// that is how it ended, as bash would say.
		// What else the backend reports (a cleanup that failed) stays.
		exit.Code, werr = 128+int(unix.SIGKILL), without(werr, backend.ErrNoExitStatus)
	}

	res := &Result{
		Backend:      s.backend,
		Command:      req.Command,
		ExitCode:     exit.Code,
		OOMKilled:    exit.OOMKilled,
		TimedOut:     outcome.timedOut || exit.TimedOut,
		Killed:       outcome.killed,
		Canceled:     outcome.canceled,
		Timeout:      req.Timeout,
		KillGrace:    req.KillGrace,
		Duration:     time.Since(start),
		Output:       capture.Text(),
		OutputBytes:  capture.Total(),
		Truncated:    capture.Truncated(),
		SpillPath:    capture.SpillPath(),
		EgressDenied: denied,
	}
	res.EgressDeniedOmitted = omitted
	if werr != nil {
		res.Failure = werr.Error()
		return res, fmt.Errorf("sandbash: %w", werr) // backends name themselves
	}
	if outcome.canceled {
		return res, fmt.Errorf("sandbash: call cancelled: %w", context.Cause(ctx))
	}
	return res, nil
}

// without is err less its parts that are target: nil if that was all.
func without(err, target error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var rest []error
		for _, e := range j.Unwrap() {
			if !errors.Is(e, target) {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// CheckNetwork refuses a network policy Open would refuse: anything but
// backend.NetworkNone and backend.NetworkOn ("" is NetworkNone).
func CheckNetwork(n backend.Network) error {
	if n != "" && n != backend.NetworkNone && n != backend.NetworkOn {
		return fmt.Errorf("sandbash: network policy %q: use %s or %s: %w", n, backend.NetworkNone, backend.NetworkOn, ErrBadNetwork)
	}
	return nil
}

func (s *Session) check(req Request) error {
	return CheckRequest(req, s.cfg.MaxCommandBytes)
}

// CheckRequest refuses a request that Run would refuse, without a session:
// an empty command, a NUL byte, a command over maxBytes (0 means
// DefaultMaxCommandBytes), a timeout out of range.
func CheckRequest(req Request, maxBytes int) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxCommandBytes
	}
	switch {
	case strings.TrimSpace(req.Command) == "":
		return fmt.Errorf("sandbash: nothing to run: give a command: %w", ErrEmptyCommand)
	case strings.IndexByte(req.Command, 0) >= 0:
		return fmt.Errorf("sandbash: refusing the command: bash cannot take a NUL byte in its argument, so it would run something else than what you sent: %w", ErrNULByte)
	case len(req.Command) > maxBytes:
		return fmt.Errorf("sandbash: the command is %d bytes, over the %d-byte limit; write long scripts to a file in the workspace and run that: %w", len(req.Command), maxBytes, ErrCommandTooLarge)
	case req.Timeout != 0 && (req.Timeout < MinTimeout || req.Timeout > MaxTimeout):
		return fmt.Errorf("sandbash: timeout %v: give between %d and %d seconds: %w", req.Timeout, MinTimeout/time.Second, MaxTimeout/time.Second, ErrTimeoutRange)
	case req.KillGrace < 0:
		return fmt.Errorf("sandbash: negative kill grace %v: %w", req.KillGrace, ErrTimeoutRange)
	}
	return nil
}

// Close ends every running call, releases the sandbox, and removes the
// session's directory: its /tmp, HOME, cache layers and (unless
// Config.OutputDir was given) its spill files. A directory given as
// Config.Dir is kept, for a later Open (see RemoveDir). It is idempotent.
func (s *Session) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()
	s.calls.Wait()
	s.review.Lock() // a change to the workspace's layers finishes first
	defer s.review.Unlock()
	err := s.bs.Close()
	if s.proxy != nil {
		err = errors.Join(err, s.proxy.Close())
	}
	// The staged mounts and the session's directory go side by side
	// (removing a directory can take milliseconds, see internal/rmtree):
	// no call runs any more, and the staged clones do not keep the
	// directories they were cloned from.
	staged := make(chan error, 1)
	go func() {
		if s.stage != nil {
			staged <- s.stage.Close()
		}
		close(staged)
	}()
	if s.cfg.Dir == "" {
		if rerr := removeAll(s.dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("sandbash: removing the session directory: %w", rerr))
		}
	}
	return errors.Join(err, <-staged)
}

// RemoveDir removes a kept session's directory (Config.Dir) once no
// session has it open, however its sandboxed commands left permissions.
func RemoveDir(dir string) error { return removeAll(dir) }

// outcome is what the supervisor did to a call: killed is set whenever it
// sent SIGKILL.
type outcome struct{ timedOut, killed, canceled bool }

type supervisor struct {
	done   chan struct{}
	result chan outcome
}

// supervise enforces the call's timeout (SIGTERM, then SIGKILL after the
// grace period) and ends it at once on cancellation or session close.
func supervise(ctx context.Context, p backend.Process, req Request, closing <-chan struct{}) *supervisor {
	s := &supervisor{done: make(chan struct{}), result: make(chan outcome, 1)}
	go func() {
		var o outcome
		defer func() { s.result <- o }()
		timer := time.NewTimer(req.Timeout)
		defer timer.Stop()
		var grace <-chan time.Time
		for {
			select {
			case <-s.done:
				return
			case <-timer.C:
				o.timedOut = true
				_ = p.Signal(unix.SIGTERM)
				g := time.NewTimer(req.KillGrace)
				defer g.Stop()
				grace = g.C
			case <-grace:
				o.killed = true
				_ = p.Signal(unix.SIGKILL)
				grace = nil
			case <-ctx.Done():
				o.canceled, o.killed = true, true
				_ = p.Signal(unix.SIGKILL)
				ctx = context.Background()
			case <-closing:
				o.killed = true
				_ = p.Signal(unix.SIGKILL)
				closing = nil
			}
		}
	}()
	return s
}

func (s *supervisor) stop() outcome {
	close(s.done)
	return <-s.result
}

type ignoreErrors struct{ w io.Writer }

func (i ignoreErrors) Write(p []byte) (int, error) {
	_, _ = i.w.Write(p)
	return len(p), nil
}

// validID reports whether id can name the session's files and containers.
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i, c := range []byte(id) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != '-') {
			return false
		}
	}
	return true
}

// NewID returns a fresh random session ID: 12 hex digits.
func NewID() string { return newID() }

func newID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// removeAll removes dir even where a sandboxed command left directories
// without write or search permission (not a concern for root). Without
// root, its chmods can only reach this user's own files.
func removeAll(dir string) error {
	err := rmtree.RemoveAll(dir)
	if err == nil || os.Geteuid() == 0 {
		// Root needs no write permission to remove; the chmod below
		// follows symlinks, which another user could swap in.
		return err
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
