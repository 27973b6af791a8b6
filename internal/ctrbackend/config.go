package ctrbackend

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandbash/sandbash/internal/hostpath"
)

// Config is what the options of a container backend set.
type Config struct {
	// Limits bound each call's container.
	Limits Limits
	// PoolSize is how many warm containers a session keeps ready.
	PoolSize int
	// Progress is where image-pull progress goes.
	Progress io.Writer
	// Host is the engine's address ("" for the engine's usual way of
	// finding it).
	Host string
	// Runtime is the OCI runtime the engine runs the containers with
	// ("" for its default): runsc (gVisor), kata, ...
	Runtime string
	// RuntimeNoNetwork is set by an engine whose Runtime is registered
	// to give containers no network whatever they ask for (runsc
	// --network=none): Open then refuses backend.NetworkOn.
	RuntimeNoNetwork bool
	// HostPaths, when sandbash runs in a container and talks to the
	// engine outside it, maps the paths sandbash sees to the engine
	// host's (package internal/hostpath); nil when the two agree.
	HostPaths *hostpath.Map
}

// Option configures a container backend. It fails on a value it cannot
// take, and the backend's New with it.
type Option func(*Config) error

// NewConfig returns the defaults (DefaultLimits, a pool of 1, progress
// nowhere) with opts applied in order.
func NewConfig(opts ...Option) (Config, error) {
	c := Config{Limits: DefaultLimits(), PoolSize: 1, Progress: io.Discard}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// WithLimits sets the per-call resource limits (default DefaultLimits).
func WithLimits(l Limits) Option {
	return func(c *Config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithPoolSize sets how many warm containers a session keeps ready
// (default 1). 0 keeps none: each call creates its container when it
// starts, which suits a session of one call.
func WithPoolSize(n int) Option {
	return func(c *Config) error {
		if n < 0 {
			return fmt.Errorf("warm pool size %d: give 0 or more", n)
		}
		c.PoolSize = n
		return nil
	}
}

// WithProgress sets where image-pull progress goes (default: nowhere).
func WithProgress(w io.Writer) Option {
	return func(c *Config) error {
		if w == nil {
			return errors.New("progress writer is nil: give io.Discard for none")
		}
		c.Progress = w
		return nil
	}
}

// WithRuntime runs the containers with the engine's OCI runtime name (as
// registered with the engine: runsc for gVisor, kata, ...); "" is the
// engine's default.
func WithRuntime(name string) Option {
	return func(c *Config) error {
		for _, r := range name {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-", r)) {
				return fmt.Errorf("runtime %q: give the name the engine knows it by (letters, digits, '.', '_', '-'), such as runsc", name)
			}
		}
		c.Runtime = name
		return nil
	}
}

// WithHost sets the engine's address (a unix:// or tcp:// URL); "" finds
// it the engine's usual way.
func WithHost(host string) Option {
	return func(c *Config) error {
		c.Host = host
		return nil
	}
}

// ErrRuntime is wrapped by the refusals of what the chosen runtime
// cannot give (WithRuntime).
var ErrRuntime = errors.New("not under this container runtime")

// ErrGVisor is why sandbash refuses gVisor's runsc as a runtime, as tried
// with Debian 12's runsc (release 20221219) under Docker 20.10.
var ErrGVisor = errors.New("sandbash cannot run its calls under gVisor's runsc yet: without runsc's --oci-seccomp, gVisor ignores the seccomp profile every call runs under (a call could chmod a file setuid, even setuid root in a root-owned workspace, and make user namespaces); with it, the call supervisor's heartbeat watch (bash's read -t) fails with EPERM under any profile that denies by default, Docker's own included, so every call ends at once; and gVisor refuses to execute the supervisor's execute-only copy of bash, and to start a container with a mount over a host socket. Use another runtime (kata, crun), or the engine's default")
