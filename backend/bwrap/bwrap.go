// Package bwrap runs sandbash calls under bubblewrap, for hosts with no
// container daemon.
//
// Each call is a fresh `bwrap --unshare-all --die-with-parent --new-session`
// with every capability dropped, sandbash's seccomp filter (package
// internal/seccomp: no setuid or setgid modes, no new namespaces, mounts,
// keyrings, bpf, io_uring, ...; no other ABI), a fresh, empty session
// keyring (keyring.go), a synthetic /proc and /dev, the host's
// system directories (/usr, /bin, /sbin, /lib*, /opt) read-only, a short /etc
// allowlist (certificates, resolver and name-service files, localtime, hosts,
// passwd/group, alternatives, the dynamic linker cache), the session's own
// /tmp and HOME, and the session's mounts. The root filesystem is a read-only
// tmpfs; the host's /tmp, /home, /root, /run and /var are not there. The
// network is unshared unless the session allows it.
//
// bubblewrap runs as the workspace owner: when sandbash runs as root and the
// workspace belongs to another user, bwrap is started with that user's uid
// and gid, so files a call creates belong to the user. A non-root sandbash
// can only run calls as itself.
//
// Host-side helpers (bwrap, the launcher where a call needs one, and
// nsenter and unshare for caches) run with a fixed environment of
// sandbash's own; the call's environment goes to bwrap as options
// (--clearenv, --setenv) so that only the command gets it.
// Nothing of a call is in a host process's argv, which every user can read:
// bwrap's options come from a file descriptor (--args), and the command
// reaches bash through another one (see launch.go).
//
// Each call is capped: memory, processes and CPU by a cgroup of its own
// where sandbash can create one, by rlimits elsewhere; file size always
// (see limits.go). Backend.Enforcement says which.
//
// A call ends when its main process exits: bwrap's init process then exits,
// and the kernel kills everything left in the sandbox's PID namespace, so
// background jobs, setsid and nohup cannot outlive it. SIGTERM is delivered to
// every process in that namespace; SIGKILL to its init.
package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/seccomp"
	"github.com/sandbash/sandbash/internal/sysbin"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

var (
	_ backend.Backend   = (*Backend)(nil)
	_ backend.Collector = (*Backend)(nil)
	_ backend.Informer  = (*Backend)(nil)
)

// Backend is the bubblewrap backend. It is safe for concurrent use.
type Backend struct {
	path    string
	version string
	bash    string // the host's bash, the launcher where a call needs one (session.startCmd)
	slirp   string // slirp4netns, for NetworkOn; "" if not installed
	limits  backend.Limits
	cgroups bool
	oneShot bool
	enf     *enforcer

	mu     sync.Mutex
	probed map[[2]int]error // by the uid and gid bwrap runs as

	confinedOnce sync.Once
	confinedHere bool

	sweepMu  sync.Mutex
	sweeping *sweep // the last removal of dead sandbash processes' cgroups
}

// Option configures New.
type Option func(*Backend)

// WithPath uses the bwrap binary at path instead of the one in the
// system's directories (sysbin.Dirs; never $PATH, which may name the
// workspace's).
func WithPath(path string) Option { return func(b *Backend) { b.path = path } }

// WithLimits sets the per-call limits (default backend.DefaultLimits).
func WithLimits(l backend.Limits) Option { return func(b *Backend) { b.limits = l } }

// WithCgroups(false) enforces the limits with rlimits alone, as on a host
// where sandbash cannot create cgroups, even where it can.
func WithCgroups(on bool) Option { return func(b *Backend) { b.cgroups = on } }

// WithOneShot(true) is for sessions that run a single call (sandbash run):
// New and Open skip their no-op sandboxes, which only make a sandbox that
// cannot be set up fail early, unless a setting says bubblewrap may not
// work here at all (see Backend.check). A sandbox that cannot be set up
// fails the call instead, with an error wrapping backend.ErrSetup; when
// bubblewrap cannot create a sandbox here at all, the error says why, as
// New's would have.
func WithOneShot(on bool) Option { return func(b *Backend) { b.oneShot = on } }

// helperEnv is the whole environment of the host-side helpers (the
// launcher shell, bwrap, nsenter, unshare): fixed, whatever sandbash's or
// the call's environment holds, so that no LD_PRELOAD, LD_LIBRARY_PATH or
// the like reaches a program running on the host, possibly as root.
var helperEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}

// New finds bwrap and checks that it can create a sandbox here, with a no-op
// run (for a one-shot backend, only where a setting says it may not: see
// Backend.check). It fails with an error wrapping backend.ErrUnavailable that says what
// to install or change.
func New(opts ...Option) (*Backend, error) {
	b := &Backend{probed: map[[2]int]error{}, limits: backend.DefaultLimits(), cgroups: true}
	for _, o := range opts {
		o(b)
	}
	if err := b.limits.Validate(); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if b.path == "" {
		p, err := sysbin.Find("bwrap")
		if err != nil {
			return nil, fmt.Errorf("bwrap: bubblewrap is not installed (%v); install it with `sudo apt-get install bubblewrap` (Debian/Ubuntu) or `sudo dnf install bubblewrap`: %w", err, backend.ErrUnavailable)
		}
		b.path = p
	}
	for _, p := range []string{"/usr/bin/bash", "/bin/bash"} {
		if unix.Access(p, unix.X_OK) == nil {
			b.bash = p
			break
		}
	}
	if p, err := sysbin.Find("slirp4netns"); err == nil {
		b.slirp = p
	}
	if b.bash == "" {
		return nil, fmt.Errorf("bwrap: no bash in /usr/bin or /bin; calls run the host's bash: install it: %w", backend.ErrUnavailable)
	}
	if !b.oneShot {
		if _, err := b.bwrapVersion(); err != nil {
			return nil, err
		}
	}
	if err := b.check(os.Geteuid(), os.Getegid()); err != nil {
		return nil, err
	}
	var err error
	if b.enf, err = newEnforcer(b.limits, b.cgroups); err != nil {
		return nil, err
	}
	// What the first call needs, made meanwhile (a one-shot backend
	// probes nothing): the seccomp filter, the copies of /etc's files
	// (a one-shot call's bwrap reads the files themselves: etcCopies),
	// and the thread that starts every call.
	dir, list, warm := etcDir, etcAllowlist, !b.oneShot
	go func() {
		_, _ = seccomp.Program()
		if warm {
			warmEtc(dir, list)
		}
		startLauncher()
	}()
	return b, nil
}

// bwrapVersion runs bwrap --version, once.
func (b *Backend) bwrapVersion() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.version != "" {
		return b.version, nil
	}
	version := exec.Command(b.path, "--version")
	version.Env = helperEnv
	out, err := version.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("bwrap: %s --version failed: %v: %s: %w", b.path, err, bytes.TrimSpace(out), backend.ErrUnavailable)
	}
	b.version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap"))
	return b.version, nil
}

// Name returns "bwrap".
func (b *Backend) Name() string { return "bwrap" }

// Close does nothing: the backend holds nothing but its settings, and
// each session releases its own sandboxes.
func (b *Backend) Close() error { return nil }

// Info describes the bubblewrap in use, for `sandbash doctor`.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	version, err := b.bwrapVersion()
	if err != nil {
		return backend.Info{}, err
	}
	if err := b.probe(os.Geteuid(), os.Getegid()); err != nil {
		return backend.Info{}, err
	}
	// Caches do not use bubblewrap's own overlays (0.9.0 and later) either
	// way; say whether it has them.
	overlay := "no native overlay flags (bubblewrap 0.9.0 added --overlay)"
	if versionAtLeast(version, 0, 9) {
		overlay = "native --overlay flags"
	}
	return backend.Info{
		Summary: fmt.Sprintf("bubblewrap %s at %s; user namespaces usable; %s; caches: overlays mounted once per session in a private mount namespace (unshare), entered by each call (nsenter)", version, b.path, overlay),
		Details: []string{
			"seccomp: " + seccompInfo() + "; a fresh, empty session keyring for each call",
			"limits: " + b.Enforcement().Summary,
			"network: " + b.networkInfo(),
		},
	}, nil
}

// Enforcement says how this backend caps each call on this host.
func (b *Backend) Enforcement() Enforcement { return b.enf.enforcement() }

var versionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d+)\.(\d+)`) })

func versionAtLeast(v string, major, minor int) bool {
	m := versionRE().FindStringSubmatch(v)
	if m == nil {
		return false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	return a > major || a == major && b >= minor
}

// check finds out before any call whether bubblewrap can create a sandbox
// as uid:gid here: with the no-op sandbox (probe), or, for a one-shot
// session, whose latency counts, only where a setting says something may
// refuse it (mayBeRestricted: a few file reads; a container, a kernel
// switch, a seccomp filter). Elsewhere a sandbox bwrap cannot set up fails
// the call, which then runs the probe to say why (process.Wait).
func (b *Backend) check(uid, gid int) error {
	if b.oneShot && !b.confined() && len(kernelRestrictions("/", uid)) == 0 {
		return nil
	}
	return b.probe(uid, gid)
}

// confined is confined("/"), read once: New checks as sandbash's uid, and
// Open again as the workspace owner's when that is another.
func (b *Backend) confined() bool {
	b.confinedOnce.Do(func() { b.confinedHere = confined("/") })
	return b.confinedHere
}

// probe runs a no-op sandbox as uid:gid, once for each.
func (b *Backend) probe(uid, gid int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err, ok := b.probed[[2]int{uid, gid}]; ok {
		return err
	}
	// With the seccomp filter, so that a kernel or bwrap that cannot load
	// it fails here, not in a call.
	filter, err := seccompFile()
	if err != nil {
		return err
	}
	defer filter.Close()
	// Only the system directories: binding all of / would copy every
	// mount of the host, other sessions' staged ones included, which come
	// and go meanwhile. The namespaces, hostname, fresh /proc and /dev
	// of every sandbox: a container's seccomp filter may refuse the
	// hostname, and its masked /proc makes the kernel refuse a fresh one.
	args := append(append(namespaceArgs(), "--seccomp", "3"), systemDirs()...)
	args = append(args, "--proc", "/proc", "--dev", "/dev")
	cmd := exec.Command(b.path, append(args, "true")...)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{filter}
	cmd.Env = helperEnv
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	}
	out, e := cmd.CombinedOutput()
	var restriction string
	if e != nil {
		restriction = usernsRestriction("/", uid, cloneUserns())
	}
	switch {
	case e == nil:
	case bytes.Contains(out, []byte("seccomp")) || bytes.Contains(out, []byte("SECCOMP")):
		err = fmt.Errorf("bwrap: bubblewrap could not load sandbash's seccomp filter (%v: %s); sandbash runs no call without it: the kernel needs CONFIG_SECCOMP_FILTER: %w",
			e, bytes.TrimSpace(out), backend.ErrUnavailable)
	case restriction != "":
		err = fmt.Errorf("bwrap: bubblewrap cannot create a sandbox as uid %d here (%v: %s): it needs new user, mount, PID and network namespaces and a fresh /proc, and %s: %w",
			uid, e, bytes.TrimSpace(out), restriction, backend.ErrUnavailable)
	default:
		err = fmt.Errorf("bwrap: bubblewrap cannot create a sandbox as uid %d here (%v: %s). It needs unprivileged user namespaces: check `sysctl user.max_user_namespaces` (must be > 0), `kernel.unprivileged_userns_clone=1` on older Debian kernels, and `kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap on Ubuntu 24.04 and later; inside a container, run it with --privileged or a seccomp profile that allows unshare: %w",
			uid, e, bytes.TrimSpace(out), backend.ErrUnavailable)
	}
	b.probed[[2]int{uid, gid}] = err
	return err
}

// Open checks the session's mounts and sets up one sandbox with a no-op
// call, so a mount bubblewrap rejects fails here rather than in the first
// real call.
func (b *Backend) Open(ctx context.Context, spec *backend.SessionSpec) (backend.Session, error) {
	if spec.Image != "" {
		return nil, fmt.Errorf("bwrap: an image (%s) was given, but bubblewrap runs on the host's own /usr and takes no image; open the session without one, or use the Docker or Podman backend: %w", spec.Image, backend.ErrSetup)
	}
	s := &session{b: b, spec: spec, live: map[*process]struct{}{}}
	s.args, s.argsTail = sandboxArgs(spec, b.limits)
	s.path, s.prefix = b.path, nil
	s.hostUID = os.Getuid()
	if b.enf.cg != nil {
		s.cgroup = sessionCgroupName(spec.ID)
		// The first call's, while the session opens: first, so that
		// the first call waits for it as little as can be.
		s.prepareCgroup()
		// What dead sandbash processes left goes alongside the
		// session's first call (Close waits for it): their names are
		// not ours.
		s.swept = b.sweepStale().done
	}
	if err := workspace.CheckSpec(spec); err != nil {
		s.Close()
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	if err := checkNetwork(spec, b.slirp); err != nil {
		s.Close()
		return nil, err
	}
	s.runUID, s.runGID = os.Geteuid(), os.Getegid()
	if os.Geteuid() == 0 && spec.UID != 0 {
		s.hostUID = spec.UID
		s.runUID, s.runGID = spec.UID, spec.GID
		s.cred = &syscall.Credential{Uid: uint32(spec.UID), Gid: uint32(spec.GID), Groups: []uint32{}}
		if err := b.check(spec.UID, spec.GID); err != nil {
			s.Close()
			return nil, err
		}
	}
	if len(spec.Overlays) > 0 {
		h, err := startHolder(spec)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.holder = h
		// nsenter enters the namespace as root and then becomes the owner.
		s.path, s.prefix = h.command(b.path, spec.UID, spec.GID)
		s.cred = nil
		if h.userns {
			// Inside the holder's user namespace sandbash is root; map the
			// sandbox back to the real user.
			s.args = append([]string{"--unshare-user", "--uid", strconv.Itoa(os.Getuid()), "--gid", strconv.Itoa(os.Getgid())}, s.args...)
		}
	}
	if b.oneShot {
		return s, nil
	}
	p, err := s.Start(ctx, &backend.Call{Command: "true", Proxy: func(net.Listener) {}})
	if err == nil {
		_, err = p.Wait()
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// systemDirs are the options that give a sandbox the host's /usr, /bin,
// /lib* and /opt, read-only.
func systemDirs() []string {
	var a []string
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	return a
}

// namespaceArgs are the bwrap options that make a sandbox's namespaces,
// the probe's as every call's.
func namespaceArgs() []string {
	return []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbash"}
}

// sandboxArgs are the bwrap options for spec that every call shares, in
// two parts: /etc's allowlist goes between them, each call's own
// (etcArgs), and each call adds its own descriptors after them. They leave
// the root writable: startCmd adds the call's own files, then makes it
// read-only.
func sandboxArgs(spec *backend.SessionSpec, l backend.Limits) (head, tail []string) {
	a := namespaceArgs()
	if spec.Network == backend.NetworkOn || spec.Network == backend.NetworkProxy {
		// The call's own namespace, which the launcher thread is in when
		// it starts bwrap (network.go).
		a = append(a, "--share-net")
	}
	// The command's environment, and nothing of bwrap's own.
	a = append(a, "--clearenv")
	for _, e := range spec.Env {
		name, val, _ := strings.Cut(e, "=")
		a = append(a, "--setenv", name, val)
	}
	a = append(a, systemDirs()...)
	// /dev is read-only but for its devices and a /dev/shm of bounded
	// size: a tmpfs takes memory, which without a cgroup nothing else caps.
	a = append(a, "--proc", "/proc", "--dev", "/dev",
		"--perms", "1777", "--size", strconv.FormatInt(shmSize(l), 10), "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev", "--dir", "/etc")
	head, a = a, nil
	a = append(a, "--bind", spec.TmpDir, "/tmp", "--bind", spec.HomeDir, backend.Home)
	// Parents before children, overlays among the mounts: a workspace in
	// overlay mode is an overlay, and what is mounted inside it (or a
	// readable path above it) must land in order.
	var binds [][3]string
	for _, o := range spec.Overlays {
		binds = append(binds, [3]string{"--bind", overlay.Merged(o), o.Target})
	}
	for _, m := range spec.Mounts {
		op := "--bind"
		if m.ReadOnly {
			op = "--ro-bind"
		}
		binds = append(binds, [3]string{op, m.Source, m.Target})
	}
	slices.SortStableFunc(binds, func(x, y [3]string) int {
		return strings.Count(x[2], "/") - strings.Count(y[2], "/")
	})
	for _, b := range binds {
		a = append(a, b[:]...)
	}
	return head, append(a, "--chdir", spec.Workspace)
}
