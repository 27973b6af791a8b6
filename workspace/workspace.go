// Package workspace decides what host paths a sandbox may see: the workspace
// root (read-write), extra readable paths (read-only) and extra writable paths
// (read-write), each mounted at the same absolute path as on the host.
//
// It refuses, before anything runs, every path that would hand the sandbox
// the host: a path that is, contains, or (after resolving symlinks) leads to a
// container control socket (Docker, containerd, CRI-O, Podman, BuildKit,
// libvirt, LXD, and whatever unix socket DOCKER_HOST or CONTAINER_HOST name),
// any unix socket at all, and `/` or the host's $HOME as writable. Backends
// call [CheckSource] again on every mount source they hand to their sandbox
// tool, so the rule holds whichever path a mount came from.
//
// [Seal] then completes a session's spec: it holds every mount in place (a
// call cannot swap a mounted path, or a directory above it, for a symlink),
// hides host processes' unix sockets in the mounted trees, protects git's
// hooks and configuration, and records what every host path leads to;
// backends check that record before every sandbox they set up ([Verify]).
package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash/backend"
)

// Config is what the user asked to mount.
type Config struct {
	// Root is the workspace root, mounted read-write; calls start there.
	Root string
	// Readable paths are mounted read-only.
	Readable []string
	// Writable paths are mounted read-write.
	Writable []string
}

// Resolve checks every path of c and returns the mounts, workspace first,
// then parents before children. Relative paths are taken from the current
// directory. Any refused path fails the whole resolution.
func Resolve(c Config) ([]backend.Mount, error) {
	if strings.TrimSpace(c.Root) == "" {
		return nil, fmt.Errorf("workspace: no workspace root given: %w", ErrBadPath)
	}
	var mounts []backend.Mount
	sockets := knownSockets()
	add := func(p, kind string, ro bool) error {
		m, err := resolveOne(p, kind, ro, sockets)
		if err != nil {
			return err
		}
		for _, o := range mounts {
			if o.Target == m.Target {
				return fmt.Errorf("workspace: %s %s is already mounted: %w", kind, p, ErrBadPath)
			}
		}
		mounts = append(mounts, m)
		return nil
	}
	if err := add(c.Root, "workspace root", false); err != nil {
		return nil, err
	}
	for _, p := range c.Readable {
		if err := add(p, "readable path", true); err != nil {
			return nil, err
		}
	}
	for _, p := range c.Writable {
		if err := add(p, "writable path", false); err != nil {
			return nil, err
		}
	}
	slices.SortStableFunc(mounts[1:], func(a, b backend.Mount) int {
		return strings.Count(a.Target, "/") - strings.Count(b.Target, "/")
	})
	if err := checkPlanted(mounts); err != nil {
		return nil, err
	}
	return mounts, nil
}

// checkPlanted refuses a path whose resolution follows a symlink that lies
// inside a directory this session mounts read-write (the workspace, a
// --writable path): a command could have planted it there to choose what a
// later session mounts, since every `run --session` and every repeated
// one-shot run resolves the same paths again.
func checkPlanted(mounts []backend.Mount) error {
	for _, m := range mounts {
		if err := CheckPlanted(m.Target, mounts); err != nil {
			return err
		}
	}
	return nil
}

// CheckPlanted refuses the host path p (absolute) if resolving it follows
// a symlink inside one of the read-write mounts (as [Resolve] returns
// them): a command could have planted it to choose what a later session
// mounts. A path that does not exist follows nothing.
func CheckPlanted(p string, mounts []backend.Mount) error {
	var writable []string
	for _, m := range mounts {
		if !m.ReadOnly {
			writable = append(writable, m.Source)
		}
	}
	link, err := symlinkWithin(p, writable)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("workspace: %s: %v: %w", p, err, ErrBadPath)
	}
	if link != "" {
		real, _ := filepath.EvalSymlinks(p)
		return fmt.Errorf("workspace: %s leads to %s through the symlink %s, inside a directory that sandboxed commands can write: a command could have planted it to choose what is mounted. Give the path it leads to if you mean it, or remove the symlink: %w",
			p, real, link, ErrBadPath)
	}
	return nil
}

// symlinkWithin resolves the absolute path p as filepath.EvalSymlinks does
// and returns the first symlink on the way that lies below one of dirs
// (resolved paths), or "".
func symlinkWithin(p string, dirs []string) (string, error) {
	resolved := "/"
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	for links := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			resolved = filepath.Dir(resolved)
			continue
		}
		next := filepath.Join(resolved, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			resolved = next
			continue
		}
		for _, d := range dirs {
			if d != "/" && strings.HasPrefix(next, d+"/") {
				return next, nil
			}
		}
		if links++; links > 255 {
			return "", fmt.Errorf("too many symlinks")
		}
		target, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(target) {
			resolved = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return "", nil
}

func resolveOne(p, kind string, ro bool, sockets []socket) (backend.Mount, error) {
	fail := func(err error) (backend.Mount, error) {
		return backend.Mount{}, fmt.Errorf("workspace: %s: %w", kind, err)
	}
	if p == "" {
		return fail(fmt.Errorf("empty path: %w", ErrBadPath))
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return fail(fmt.Errorf("%q: %v: %w", p, err, ErrBadPath))
	}
	// The policy is checked before existence: a socket path is refused
	// even while its daemon is not running.
	real, rerr := filepath.EvalSymlinks(abs)
	if rerr != nil {
		real = abs
	}
	if !ro {
		if err := checkWritable(abs, real); err != nil {
			return fail(err)
		}
	}
	if err := checkTarget(abs); err != nil {
		return fail(err)
	}
	if err := checkSource(abs, sockets); err != nil {
		return fail(err)
	}
	if rerr != nil {
		return fail(fmt.Errorf("%s: %v: %w", abs, rerr, ErrBadPath))
	}
	if kind == "workspace root" {
		if fi, err := os.Stat(real); err != nil || !fi.IsDir() {
			return fail(fmt.Errorf("%s is not a directory; give an existing project directory: %w", abs, ErrBadPath))
		}
	}
	return backend.Mount{Source: real, Target: abs, ReadOnly: ro}, nil
}

// checkWritable refuses the filesystem root and the host's home directory as
// read-write mounts: either would let a command rewrite the user's setup.
func checkWritable(abs, real string) error {
	if abs == "/" || real == "/" {
		return fmt.Errorf("refusing to mount / read-write; give the project directory instead: %w", ErrTooBroad)
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		rh, err := filepath.EvalSymlinks(home)
		if err != nil {
			rh = filepath.Clean(home)
		}
		if abs == filepath.Clean(home) || real == rh {
			return fmt.Errorf("refusing to mount your home directory %s read-write (it holds credentials and shell setup); give the project directory inside it instead: %w", home, ErrTooBroad)
		}
	}
	return nil
}

// checkTarget refuses targets that would cover or sit in what the sandbox
// provides itself.
func checkTarget(abs string) error {
	for _, r := range []string{"/proc", "/dev", "/sys"} {
		if within(abs, r) {
			return fmt.Errorf("%s is inside %s, which the sandbox provides itself: %w", abs, r, ErrReserved)
		}
	}
	switch {
	case abs == "/":
		return fmt.Errorf("/ would cover the sandbox's whole filesystem; give the project directory instead: %w", ErrReserved)
	case abs == "/tmp":
		return fmt.Errorf("/tmp itself is the sandbox's private /tmp; give a directory below it, such as /tmp/project: %w", ErrReserved)
	case within(backend.Home, abs) || within(abs, backend.Home):
		return fmt.Errorf("%s overlaps %s, the sandbox's own HOME; give another directory: %w", abs, backend.Home, ErrReserved)
	}
	return nil
}

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// CheckSource refuses a host path that may never be mounted into a sandbox:
// one that is, contains, or after resolving symlinks leads to a container
// control socket, or that is any unix socket. The path must be absolute.
func CheckSource(p string) error { return checkSource(p, knownSockets()) }

// checkSource is CheckSource with the sockets known here.
func checkSource(p string, sockets []socket) error {
	if !filepath.IsAbs(p) {
		return fmt.Errorf("%q is not an absolute path: %w", p, ErrBadPath)
	}
	clean := filepath.Clean(p)
	real := clean
	if r, err := filepath.EvalSymlinks(clean); err == nil {
		real = r
	}
	if err := checkPaths(clean, real, sockets); err != nil {
		return err
	}
	if fi, err := os.Stat(real); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return fmt.Errorf("refusing to mount %s: it is a unix socket, and no socket is ever mounted into a sandbox: %w", clean, ErrSocket)
	}
	return nil
}

// checkPaths is the pure part of CheckSource: clean is the path as given,
// real the same path with symlinks resolved.
func checkPaths(clean, real string, sockets []socket) error {
	for _, s := range sockets {
		for _, c := range []string{clean, real} {
			if !covers(c, s.Pattern) {
				continue
			}
			how := "it contains"
			if len(components(c)) == len(components(s.Pattern)) {
				how = "it is"
			}
			if c != clean {
				how = "it leads to " + c + ", and " + how
			}
			return fmt.Errorf("refusing to mount %s: %s the %s control socket %s; a sandbox that can reach it controls the host. Mount a narrower path that does not include it: %w",
				clean, how, s.What, s.Pattern, ErrControlSocket)
		}
	}
	return nil
}

// CheckSpec runs CheckSource on every host path a session mounts: its /tmp,
// its HOME and every mount source, and checks that they still lead to what
// Seal recorded (Verify). Backends call it before they hand the paths to
// their sandbox tool, whoever built the spec.
func CheckSpec(spec *backend.SessionSpec) error {
	sources := []string{spec.TmpDir, spec.HomeDir}
	for _, m := range spec.Mounts {
		sources = append(sources, m.Source)
	}
	sockets := knownSockets()
	for _, src := range sources {
		if err := checkSource(src, sockets); err != nil {
			return err
		}
	}
	return Verify(spec)
}

// Owner returns the uid and gid that own path: calls run as the workspace's
// owner so files they create belong to the user.
func Owner(path string) (uid, gid int, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, 0, fmt.Errorf("workspace: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, fmt.Errorf("workspace: cannot read the owner of %s", path)
	}
	return int(st.Uid), int(st.Gid), nil
}
