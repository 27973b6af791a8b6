package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// What a call could do to the host paths a session mounts, and how Seal
// stops it.
//
// Backends mount by path, at every call (bwrap) or every container (Docker
// and Podman prepare containers while calls run). A path that lies inside a
// writable mount's source can be renamed, removed or replaced by a symlink
// from inside a call, and the next sandbox would mount whatever the path
// then leads to: a directory a call swapped for a symlink to / would give
// the next call the host's root. Seal makes every such path a mount point
// in every sandbox (a self-bind of each directory on the way, "pins"):
// the kernel refuses to rename or remove a mount point (EBUSY) in the
// mount namespace that has it, so no call can move a mounted path or any
// directory above it. Session directories and cache directories cannot be
// pinned (they are mounted elsewhere, or by the engine), so inside a
// writable mount they are refused. Then Seal records what every host path
// leads to (Identities), walking it without following any symlink, and
// backends compare before every sandbox (Verify): anything that changed
// anyway (on the host, or through a path this reasoning missed) stops the
// call.

// Seal completes a session's spec before it reaches a backend. It
//
//   - refuses session and cache directories inside a writable mount
//     (ErrNested) and pins every other mount source that lies inside one;
//   - hides every unix socket a host process listens on inside a mounted
//     tree, with /dev/null mounted over it (and pins the directories above
//     it), and refuses a cache directory that holds one (ErrSocket);
//   - mounts, writable, the main repository's git directory of a writable
//     mount that is a linked worktree, when git linked the two (see
//     linkWorktrees), and treats it as a writable mount from then on;
//   - protects the git metadata of the repositories at the root of every
//     writable mount (see protectGit);
//   - records Identities.
//
// It resolves the session's own directories (TmpDir, HomeDir, overlay
// directories) to their real paths, and may create a missing .git/hooks,
// .git/info or .git/config, owned by spec.UID:GID, in the workspace (or
// the main repository of a linked worktree).
func Seal(spec *backend.SessionSpec) error {
	for _, p := range []*string{&spec.TmpDir, &spec.HomeDir} {
		if err := realPath(p); err != nil {
			return err
		}
	}
	for i := range spec.Overlays {
		o := &spec.Overlays[i]
		for _, p := range []*string{&o.Lower, &o.Upper, &o.Work} {
			if err := realPath(p); err != nil {
				return err
			}
		}
		for j := range o.Layers {
			if err := realPath(&o.Layers[j]); err != nil {
				return err
			}
		}
	}
	for _, m := range spec.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) || filepath.Clean(m.Source) != m.Source || filepath.Clean(m.Target) != m.Target {
			return fmt.Errorf("workspace: mount %s on %s: give clean absolute paths: %w", m.Source, m.Target, ErrBadPath)
		}
	}
	s := &sealer{spec: spec, user: slices.Clone(spec.Mounts), mounts: slices.Clone(spec.Mounts), gitSeen: map[string]bool{}}
	if err := s.linkWorktrees(); err != nil {
		return err
	}
	if err := s.refuseNested(); err != nil {
		return err
	}
	// Git first: it creates what it protects, and the socket walk then
	// sees the tree as the sandbox will.
	for _, m := range s.user {
		if !m.ReadOnly {
			if err := s.protectGit(m); err != nil {
				return err
			}
		}
	}
	if err := s.maskSockets(); err != nil {
		return err
	}
	for _, m := range s.user {
		for _, w := range s.user {
			if w.ReadOnly || w == m || !within(m.Source, w.Source) || m.Source == w.Source {
				continue
			}
			s.pin(join(w.Target, rel(m.Source, w.Source)))
		}
	}
	slices.SortStableFunc(s.mounts, func(a, b backend.Mount) int {
		return strings.Count(a.Target, "/") - strings.Count(b.Target, "/")
	})
	spec.Mounts = s.mounts
	ids := map[string]backend.FileID{}
	for _, p := range hostPaths(spec) {
		id, err := identify(p)
		if err != nil {
			return fmt.Errorf("workspace: checking %s: %v: %w", p, err, ErrBadPath)
		}
		ids[p] = id
	}
	for _, p := range s.absent {
		if _, err := identify(p); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("workspace: %s exists: %w", p, ErrBadPath)
		}
		ids[p] = backend.FileID{}
	}
	spec.Identities = ids
	return nil
}

func realPath(p *string) error {
	if *p == "" {
		return nil
	}
	r, err := filepath.EvalSymlinks(*p)
	if err != nil {
		return fmt.Errorf("workspace: %v: %w", err, ErrBadPath)
	}
	*p = r
	return nil
}

type sealer struct {
	spec    *backend.SessionSpec
	user    []backend.Mount // the mounts the spec came with
	mounts  []backend.Mount // those, then what Seal adds
	absent  []string        // host paths that must not exist
	gitSeen map[string]bool // git directories already protected
}

// refuseNested refuses session and cache directories inside a writable
// mount: a call could replace them, and nothing can pin them.
func (s *sealer) refuseNested() error {
	inside := func(p string) (backend.Mount, bool) {
		for _, w := range s.user {
			if !w.ReadOnly && within(p, w.Source) {
				return w, true
			}
		}
		return backend.Mount{}, false
	}
	for _, p := range []string{s.spec.TmpDir, s.spec.HomeDir} {
		if w, ok := inside(p); ok && p != "" {
			return fmt.Errorf("workspace: the session's directory %s lies inside %s, which the sandbox can write, so a call could replace it; keep sessions outside (set TMPDIR, or the session directory, elsewhere): %w", p, w.Target, ErrNested)
		}
	}
	for _, o := range s.spec.Overlays {
		if w, ok := inside(o.Lower); ok {
			return fmt.Errorf("workspace: cache %s: its host directory %s lies inside %s, which the sandbox can write, so a call could replace it between calls; the sandbox sees it there already: drop the cache, or use a directory outside: %w", o.Name, o.Lower, w.Target, ErrNested)
		}
		for _, p := range append([]string{o.Upper, o.Work}, o.Layers...) {
			if w, ok := inside(p); ok {
				return fmt.Errorf("workspace: cache %s: the session's layer %s lies inside %s, which the sandbox can write; keep sessions outside (set TMPDIR, or the session directory, elsewhere): %w", o.Name, p, w.Target, ErrNested)
			}
		}
	}
	return nil
}

// target reports the mount whose target is t, if any.
func (s *sealer) target(t string) (backend.Mount, bool) {
	for _, m := range s.mounts {
		if m.Target == t {
			return m, true
		}
	}
	return backend.Mount{}, false
}

// innermost returns the mount t lies in: the one with the longest target
// that is t or above it.
func (s *sealer) innermost(t string) (backend.Mount, bool) { return innermostIn(s.mounts, t) }

func innermostIn(ms []backend.Mount, t string) (backend.Mount, bool) {
	var best backend.Mount
	found := false
	for _, m := range ms {
		if within(t, m.Target) && (!found || len(m.Target) > len(best.Target)) {
			best, found = m, true
		}
	}
	return best, found
}

// writable reports whether a call can change what is at sandbox path t.
func (s *sealer) writable(t string) bool {
	m, ok := s.innermost(t)
	return ok && !m.ReadOnly
}

// add adds m unless something is mounted at its target already.
func (s *sealer) add(m backend.Mount) {
	if _, ok := s.target(m.Target); !ok {
		s.mounts = append(s.mounts, m)
	}
}

// pin makes sandbox path t, and every directory above it, stay where it is
// in every call: each one that a call could rename or replace (it lies in
// a writable mount and is not a mount point) gets a self-bind, which makes
// it a mount point.
func (s *sealer) pin(t string) {
	for _, c := range prefixes(t) {
		if _, ok := s.target(c); ok {
			continue
		}
		m, ok := s.innermost(c)
		if !ok || m.ReadOnly {
			continue
		}
		s.mounts = append(s.mounts, backend.Mount{Source: join(m.Source, rel(c, m.Target)), Target: c})
	}
}

// views returns where host path p appears in the sandbox: under the target
// of every user mount whose source holds it, unless another mount covers
// that place.
func (s *sealer) views(p string) []string {
	var out []string
	for _, m := range s.user {
		if !within(p, m.Source) {
			continue
		}
		t := join(m.Target, rel(p, m.Source))
		if u, ok := innermostIn(s.user, t); ok && join(u.Source, rel(t, u.Target)) == p && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// prefixes returns "/a", "/a/b", ... up to p (clean and absolute).
func prefixes(p string) []string {
	var out []string
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return append(out, p)
}

// rel returns p relative to dir (p within dir), "" for dir itself.
func rel(p, dir string) string {
	return strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
}

func join(dir, r string) string {
	if r == "" {
		return dir
	}
	return filepath.Join(dir, r)
}

// hostPaths lists every host path spec hands to a sandbox.
func hostPaths(spec *backend.SessionSpec) []string {
	var out []string
	add := func(p string) {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	add(spec.TmpDir)
	add(spec.HomeDir)
	for _, m := range spec.Mounts {
		add(m.Source)
	}
	for _, o := range spec.Overlays {
		add(o.Lower)
		add(o.Upper)
		add(o.Work)
		for _, l := range o.Layers {
			add(l)
		}
	}
	return out
}

// errSymlink: a path has a symlink where it had none.
var errSymlink = errors.New("a symlink")

// identify opens p one component at a time without following symlinks
// (O_PATH|O_NOFOLLOW: a symlink anywhere on the way is an error) and
// returns what it leads to.
func identify(p string) (backend.FileID, error) {
	if !filepath.IsAbs(p) {
		return backend.FileID{}, fmt.Errorf("%q is not absolute: %w", p, ErrBadPath)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return backend.FileID{}, err
	}
	defer func() { unix.Close(fd) }()
	var st unix.Stat_t
	for i, c := range components(p) {
		nfd, err := unix.Openat(fd, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return backend.FileID{}, &fs.PathError{Op: "open", Path: "/" + strings.Join(components(p)[:i+1], "/"), Err: err}
		}
		unix.Close(fd)
		fd = nfd
		if err := unix.Fstat(fd, &st); err != nil {
			return backend.FileID{}, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return backend.FileID{}, fmt.Errorf("/%s is %w", strings.Join(components(p)[:i+1], "/"), errSymlink)
		}
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return backend.FileID{}, err
	}
	return backend.FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino), Type: uint32(st.Mode) & unix.S_IFMT}, nil
}

// same reports whether now is what was: the same file, or for a regular
// file, any regular file (editors and git replace files they rewrite; the
// path is the one checked, with no symlink on the way).
func same(was, now backend.FileID) bool {
	if was.Type == unix.S_IFREG {
		return now.Type == unix.S_IFREG
	}
	return was == now
}

// Verify checks, just before a sandbox is set up, that every host path of
// spec still leads to what Seal recorded, and that nothing appeared where
// it recorded absence. Backends call it before every bwrap start and every
// container they create; on error they run nothing.
func Verify(spec *backend.SessionSpec) error {
	for _, p := range hostPaths(spec) {
		if _, ok := spec.Identities[p]; !ok {
			return fmt.Errorf("workspace: %s was not checked when the session opened; open sessions with sandbash.Open (or call workspace.Seal on the spec): %w", p, ErrBadPath)
		}
	}
	return compare(spec.Identities, func(p string) (backend.FileID, bool, error) {
		id, err := identify(p)
		return id, true, err
	}, "Nothing ran. If you changed it, open a new session; if not, a call may have: look at what it did")
}

// Sealed is what Seal decided for a session: its mounts, and what their
// host paths led to. A session reopened in another process (a CLI session)
// keeps it, and Compare checks the new decision against it.
type Sealed struct {
	Mounts     []backend.Mount           `json:"mounts"`
	Identities map[string]backend.FileID `json:"identities"`
}

// Compare checks a sealed spec against what an earlier open of the same
// session sealed (nil: nothing to compare): a mount target that now has
// another source, or a host path that now leads elsewhere, is refused.
// What only one of them has is not compared.
func Compare(before *Sealed, spec *backend.SessionSpec) error {
	if before == nil {
		return nil
	}
	was := map[string]string{}
	for _, m := range before.Mounts {
		was[m.Target] = m.Source
	}
	for _, m := range spec.Mounts {
		if src, ok := was[m.Target]; ok && src != m.Source {
			return fmt.Errorf("workspace: %s now leads to %s, not to %s as when the session opened. Open a new session: %w", m.Target, m.Source, src, ErrChanged)
		}
	}
	return compare(before.Identities, func(p string) (backend.FileID, bool, error) {
		id, ok := spec.Identities[p]
		if ok && id == (backend.FileID{}) {
			return id, true, fs.ErrNotExist
		}
		return id, ok, nil
	}, "Open a new session")
}

func compare(was map[string]backend.FileID, now func(string) (backend.FileID, bool, error), advice string) error {
	paths := make([]string, 0, len(was))
	for p := range was {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		w := was[p]
		id, ok, err := now(p)
		if !ok {
			continue
		}
		var what string
		switch {
		case w == (backend.FileID{}) && errors.Is(err, fs.ErrNotExist):
			continue
		case w == (backend.FileID{}) && filepath.Base(p) == "commondir":
			return fmt.Errorf("workspace: %s appeared since the session opened: git on the host would now take this repository's configuration and hooks from the directory it names. Check it and remove it (rm %s); until then no call runs: %w", p, p, ErrChanged)
		case w == (backend.FileID{}):
			what = "appeared"
		case errors.Is(err, errSymlink):
			what = "now leads through " + err.Error()
		case errors.Is(err, fs.ErrNotExist):
			what = "no longer exists"
		case err != nil:
			what = "cannot be checked (" + err.Error() + ")"
		case !same(w, id):
			what = "now leads to another file (it was replaced or moved)"
		default:
			continue
		}
		return fmt.Errorf("workspace: %s %s since the session opened. %s: %w", p, what, advice, ErrChanged)
	}
	return nil
}
