package workspace

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// A unix socket that a host process listens on is reachable through any
// mount that shows it, read-only ones included (connect needs no write
// access to the filesystem): an ssh-agent, a language server, a dev
// server's control socket, git's fsmonitor daemon (.git/fsmonitor--daemon.ipc)
// inside the workspace would take commands from a call. Seal walks every
// mounted tree when the session opens and mounts /dev/null over each such
// socket, in every place the sandbox sees it; pins keep the directories
// above it from being moved, so the next sandbox still finds it where the
// mask goes. Connecting to the masked path then fails (ECONNREFUSED: a
// character device is no socket). A socket created after the session opened
// is not masked.

// maskSockets masks the live sockets in every mounted tree, and refuses a
// cache whose host directory holds one (a cache is mounted by the engine,
// where nothing can be masked).
func (s *sealer) maskSockets() error {
	for _, m := range s.user {
		covered := false
		for _, o := range s.user {
			if o.Source != m.Source && within(m.Source, o.Source) {
				covered = true // walked with o; views finds it under m too
			}
		}
		if covered {
			continue
		}
		socks, err := liveSockets(m.Source)
		if err != nil {
			return err
		}
		for _, p := range socks {
			for _, t := range s.views(p) {
				s.add(backend.Mount{Source: "/dev/null", Target: t, ReadOnly: true})
				s.pin(t)
			}
		}
	}
	for _, o := range s.spec.Overlays {
		socks, err := liveSockets(o.Lower)
		if err != nil {
			return err
		}
		if o.Workspace {
			// A workspace in overlay mode: masked where the sandbox
			// sees it, though overlayfs passes no connection through
			// to a lower layer's socket today. No pins: nothing of the
			// host's workspace is writable, and the overlay
			// (redirect_dir=nofollow) shows a host socket only at its
			// own path, through directories the call has not replaced.
			for _, p := range socks {
				s.add(backend.Mount{Source: "/dev/null", Target: join(o.Target, rel(p, o.Lower)), ReadOnly: true})
			}
			continue
		}
		if len(socks) > 0 {
			return fmt.Errorf("workspace: cache %s: %s is a unix socket a host process listens on, and a cache would hand it to the sandbox; stop that process or pick another directory: %w", o.Name, socks[0], ErrSocket)
		}
	}
	return nil
}

// liveSockets walks root (without following symlinks, by directory entry
// type: no stat per file) and returns the unix sockets in it that a
// process listens on.
func liveSockets(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			if d != nil && d.IsDir() && p != root && unix.Access(p, unix.X_OK) != nil {
				return fs.SkipDir // we cannot enter it, nor can the sandbox's user
			}
			return fmt.Errorf("workspace: cannot look for unix sockets in %s (%v); sandbash reads every directory it mounts: make it readable, or mount a narrower path: %w", p, err, ErrBadPath)
		}
		if d.Type()&fs.ModeSocket != 0 && listening(p) {
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

// listening reports whether a process listens on the unix socket at p. It
// connects (and at once hangs up): only ECONNREFUSED means no process has
// the socket, and then none ever will (a new listener needs a new inode).
// Anything else (connected, a full backlog, a datagram socket, no
// permission) counts as listening.
func listening(p string) bool {
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false
	}
	if err != nil {
		return true
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return err != nil
	}
	sfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return true
	}
	defer unix.Close(sfd)
	// Through the descriptor: no path length limit, no symlink race.
	err = unix.Connect(sfd, &unix.SockaddrUnix{Name: "/proc/self/fd/" + strconv.Itoa(fd)})
	return !errors.Is(err, unix.ECONNREFUSED)
}
