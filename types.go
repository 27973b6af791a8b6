package sandbash

import (
	"os"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/overlay"
)

// What a library user needs besides one backend package, re-exported so
// that `sandbash` and, say, `backend/bwrap` are the only imports.

// Network is a session's network policy.
type Network = backend.Network

// Network policies: NetworkNone (the default: only the sandbox's own
// loopback) and NetworkOn.
const (
	NetworkNone = backend.NetworkNone
	NetworkOn   = backend.NetworkOn
)

// Cache is a dependency cache shared copy-on-write (see package overlay).
type Cache = overlay.Cache

// ResolveCaches returns the caches named (gradle, maven, cargo, go, npm,
// pip, or all) and given as HOST:SANDBOX directories, as `--cache` and
// `--cache-dir` do, for the current user.
func ResolveCaches(names, dirs []string) ([]Cache, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, err
	}
	return overlay.Resolve(names, dirs, home, overlay.HostGoEnv)
}

// Limits bound each call: memory, CPUs, processes, open files, file size.
type Limits = backend.Limits

// DefaultLimits are the limits every backend applies unless told
// otherwise: 4 GiB of memory, 2 CPUs (or fewer if the host has fewer),
// 4096 processes and threads.
func DefaultLimits() Limits { return backend.DefaultLimits() }
