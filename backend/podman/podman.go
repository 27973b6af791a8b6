//go:build containers_image_openpgp

// Package podman runs sandbash calls in Podman containers, over the libpod
// REST API (package internal/libpod, a small client that makes the
// requests Podman's v5 Go bindings made, without them; it speaks to a
// Podman 4.3 service).
//
// It gives the same guarantees as the Docker backend: one fresh container
// per call, removed after it, kept warm in a small per-session pool; the
// workspace owner's uid:gid; every capability dropped, no-new-privileges,
// sandbash's seccomp profile (package internal/seccomp; the libpod API takes
// it as a path, so it is written into the session's directory), nosuid
// mounts, a read-only root filesystem, the call supervisor as PID 1 (no catatonit), memory, CPU,
// pids, nofile and nproc limits (where a rootless service cannot set
// cgroup limits, rlimits instead: see [Enforcement]); with a rootless
// service, the user's uid kept as itself (keep-id); network "none" unless turned on; no
// supplementary groups from the image, none of the image's ENV, log driver
// "none" (the service keeps no copy of a call's output); everything
// labelled and collected by [Backend.GC]. See package internal/ctrbackend for
// how a call is handed over and how its end is read: the session and call
// lifecycle is that package's, and this package is its engine (engine.go):
// the libpod API's requests.
//
// # Build tags
//
// This package builds only with the tag containers_image_openpgp:
//
//	go build -tags containers_image_openpgp,exclude_graphdriver_btrfs ./...
//
// Without it the package is empty and the rest of sandbash builds as usual.
// The tags were the needs of Podman's bindings (containers_image_openpgp
// avoids gpgme; exclude_graphdriver_btrfs the btrfs headers), which this
// package no longer uses; the constraint stays until the builds that name
// the tags (make build, make install's documentation, CI) drop them.
package podman

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman/internal/libpod"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/hostpath"
	"github.com/sandbash/sandbash/internal/seccomp"
)

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Collector   = (*Backend)(nil)
	_ backend.Informer    = (*Backend)(nil)
	_ backend.ImageRunner = (*Backend)(nil)
)

// Backend is the Podman backend: the container lifecycle of package
// internal/ctrbackend (Open, GC, HasImage) on the Podman service. It is safe
// for concurrent use. Its options: WithLimits, WithPoolSize, WithProgress
// and WithURI.
type Backend struct {
	*container.Backend
	e *engine
}

// Option configures New; an option given a bad value makes New fail.
type Option = container.Option

// WithLimits sets the per-call resource limits (default
// backend.DefaultLimits()).
func WithLimits(l backend.Limits) Option { return container.WithLimits(l) }

// WithPoolSize sets how many warm containers a session keeps ready
// (default 1). 0 keeps none: each call creates its container when it
// starts, which suits a session of one call. A negative size is an error.
func WithPoolSize(n int) Option { return container.WithPoolSize(n) }

// WithProgress sets where image-pull progress goes (default: nowhere).
func WithProgress(w io.Writer) Option { return container.WithProgress(w) }

// WithRuntime runs the containers under the OCI runtime name, as Podman
// knows it (containers.conf [engine.runtimes]: runsc, kata, crun, ...),
// instead of its default. Egress rules are refused under it.
func WithRuntime(name string) Option { return container.WithRuntime(name) }

// WithURI connects to the service at uri (unix:///path), overriding
// CONTAINER_HOST and the default sockets.
func WithURI(uri string) container.Option { return container.WithHost(uri) }

// New connects to the Podman service as podman does: CONTAINER_HOST, else
// the rootful socket /run/podman/podman.sock, else the rootless
// $XDG_RUNTIME_DIR/podman/podman.sock. It fails with an error wrapping
// backend.ErrUnavailable when no service answers.
func New(ctx context.Context, opts ...Option) (*Backend, error) {
	cfg, err := container.NewConfig(opts...)
	if err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	uri := cfg.Host
	if uri == "" {
		uri = defaultURI()
	}
	if uri == "" {
		return nil, fmt.Errorf("podman: no Podman service socket found (CONTAINER_HOST is unset, and neither /run/podman/podman.sock nor $XDG_RUNTIME_DIR/podman/podman.sock exists); start one with `podman system service --time=0 unix:///run/podman/podman.sock &` (as root) or, as a normal user, `systemctl --user start podman.socket` or `podman system service --time=0 &`: %w", backend.ErrUnavailable)
	}
	c, err := libpod.New(uri)
	if err != nil {
		return nil, fmt.Errorf("podman: %v: %w", err, backend.ErrUnavailable)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(cctx); err != nil {
		return nil, fmt.Errorf("podman: cannot reach the Podman service at %s (unable to connect to Podman socket: %v); start it with `podman system service --time=0 %s &`, or point CONTAINER_HOST at a running one: %w", uri, err, uri, backend.ErrUnavailable)
	}
	if cfg.Runtime == "runsc" {
		return nil, fmt.Errorf("podman: %w: %w", container.ErrGVisor, container.ErrRuntime)
	}
	if cfg.HostPaths, err = hostpath.Detect(ctx, func(ctx context.Context, id string) ([]hostpath.Mount, bool, error) {
		d, err := c.ContainerInspect(ctx, id)
		if libpod.IsNotFound(err) {
			return nil, false, nil
		} else if err != nil {
			return nil, false, err
		}
		var ms []hostpath.Mount
		for _, m := range d.Mounts {
			ms = append(ms, hostpath.Mount{Source: m.Source, Destination: m.Destination})
		}
		return ms, true, nil
	}); err != nil {
		return nil, fmt.Errorf("podman: %v: %w", err, backend.ErrUnavailable)
	}
	e := &engine{c: c, uri: uri, enf: rootful, limits: cfg.Limits}
	// Its own deadline: the service's info takes a fraction of a second,
	// but many seconds on a loaded machine.
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := e.probe(pctx); err != nil {
		return nil, fmt.Errorf("podman: asking the Podman service at %s whether it is rootless: %v; check that it runs (`podman info`): %w", uri, err, backend.ErrUnavailable)
	}
	return &Backend{Backend: container.NewBackend(e, cfg), e: e}, nil
}

func defaultURI() string {
	if h := os.Getenv("CONTAINER_HOST"); h != "" {
		return h
	}
	// Not root, the user's own rootless service comes first: the rootful
	// socket is root's (mode 0600), and where it is not, it is root's
	// engine all the same.
	xdg := os.Getenv("XDG_RUNTIME_DIR")
	if xdg == "" && os.Geteuid() != 0 {
		xdg = fmt.Sprintf("/run/user/%d", os.Geteuid())
	}
	candidates := []string{"/run/podman/podman.sock"}
	if xdg != "" && os.Geteuid() != 0 {
		candidates = []string{xdg + "/podman/podman.sock", "/run/podman/podman.sock"}
	} else if xdg != "" {
		candidates = append(candidates, xdg+"/podman/podman.sock")
	}
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return "unix://" + c
		}
	}
	return ""
}

var _ backend.Backend = (*Backend)(nil)

// URI is the address of the Podman service the backend uses.
func (b *Backend) URI() string { return b.e.uri }

// Name returns "podman".
func (b *Backend) Name() string { return "podman" }

// Close releases the idle connections to the service. It is idempotent.
func (b *Backend) Close() error {
	b.e.c.CloseIdleConnections()
	return nil
}

// Info asks the service for its version and whether it supports seccomp,
// for `sandbash doctor`.
func (b *Backend) Info(ctx context.Context) (backend.Info, error) {
	v, err := b.e.c.Version(ctx)
	if err != nil {
		return backend.Info{}, fmt.Errorf("podman: %w", err)
	}
	sc := "sandbash's profile on every container: " + seccomp.ProfileSummary()
	rt := "calls run under the service's default runtime"
	if i, err := b.e.c.Info(ctx); err != nil {
		return backend.Info{}, fmt.Errorf("podman: %w", err)
	} else if i.Host == nil || !i.Host.Security.SECCOMPEnabled {
		sc = "NOT SUPPORTED by the service (seccompEnabled is false): containers would run without sandbash's profile; use a Podman built with seccomp on a kernel with CONFIG_SECCOMP"
	} else if i.Host.OCIRuntime != nil {
		rt += ", " + i.Host.OCIRuntime.Name + " (" + i.Host.OCIRuntime.Path + ")"
	}
	if r := b.Config().Runtime; r != "" {
		rt = "calls run under " + r + "; egress rules are refused under it"
	}
	mode := "rootful"
	if b.e.rootless {
		mode = fmt.Sprintf("rootless (uid %d, calls keep their uid: keep-id)", b.e.uid)
	}
	return backend.Info{
		Summary: fmt.Sprintf("Podman %s at %s, API %s, %s", v.Version, b.e.uri, v.APIVersion, mode),
		Details: []string{"seccomp: " + sc, "runtime: " + rt, "paths: " + container.HostPathsLine(b.Config().HostPaths), "limits: " + b.Enforcement().Summary},
	}, nil
}

// Enforcement says how the service caps each call's container.
type Enforcement struct {
	// Memory, Pids and CPU: the limit holds for the container as a whole
	// (the service sets a cgroup limit). A rootless service on cgroup v1,
	// or on cgroup v2 without the controller delegated to its user, cannot
	// set them; sandbash then caps memory per process (RLIMIT_DATA) and
	// processes with RLIMIT_NPROC in the container's user namespace, and
	// CPU not at all.
	Memory, Pids, CPU bool
	// Summary says, in a sentence, what is capped and how.
	Summary string
}

// Enforcement says how this backend caps each call on its service.
func (b *Backend) Enforcement() Enforcement {
	en := b.e.enf
	en.Summary = b.e.summary()
	return en
}
