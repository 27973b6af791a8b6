// Package docker runs sandbash calls in Docker containers, over the Engine
// API (github.com/moby/moby/client), negotiating down to the daemon's API
// version (Docker 20.10 speaks 1.41).
//
// Every call gets a fresh container that runs exactly that call and is
// removed after it. To hide the ~170 ms a container costs, each session keeps
// a small pool of containers created and started ahead of time, each waiting
// for its one command (see package internal/ctrbackend for how a call is
// handed over and how its end is read in-band, unforgeably).
//
// Containers run as the workspace owner's uid:gid with every capability
// dropped, no-new-privileges, sandbash's seccomp profile (package
// internal/seccomp: Podman's default allowlist without setuid/setgid modes,
// new namespaces, mounts, keyrings, io_uring, ...), a read-only root
// filesystem (the session's /tmp and HOME are mounted writable), docker-init
// as PID 1, and memory, CPU, pids, nofile and nproc limits. runc gives each
// container a fresh session keyring. They are never privileged and get no
// devices, no host namespaces and no sockets. The network is "none" unless
// the session turns it on (then the default bridge). The group is given
// numerically, so the daemon adds no supplementary groups from the image's
// /etc/group; the image's ENV is removed from the containers' environment;
// the log driver is "none": the daemon keeps no copy of a call's output.
//
// Everything the backend creates carries the labels sandbash.session,
// sandbash.owner and sandbash.created; [Backend.GC] removes what belongs to
// processes that are gone.
//
// The session and call lifecycle is package internal/ctrbackend's; this
// package is its engine (engine.go): the Engine API's requests.
package docker

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/system"
	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash/backend"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/dockerctx"
	"github.com/sandbash/sandbash/internal/hostpath"
	"github.com/sandbash/sandbash/internal/seccomp"
)

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Collector   = (*Backend)(nil)
	_ backend.Informer    = (*Backend)(nil)
	_ backend.ImageRunner = (*Backend)(nil)
)

// Backend is the Docker backend: the container lifecycle of package
// internal/ctrbackend (Open, GC, HasImage) on the Docker engine. It is safe
// for concurrent use. Its options: WithLimits, WithPoolSize, WithProgress
// and WithHost.
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

// WithRuntime runs the containers under the daemon's OCI runtime name
// (registered in its daemon.json "runtimes": runsc for gVisor, kata, ...)
// instead of its default. New fails when the daemon has no such runtime.
// Egress rules are refused under any runtime but the default, and
// --network on under one registered with --network=none.
func WithRuntime(name string) Option { return container.WithRuntime(name) }

// WithHost connects to the daemon at host (unix:///path or tcp://...),
// overriding DOCKER_HOST and the docker context.
func WithHost(host string) Option { return container.WithHost(host) }

// New connects to the Docker daemon the way the docker CLI finds it:
// DOCKER_HOST (with DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, DOCKER_API_VERSION),
// else the context named by DOCKER_CONTEXT or the CLI config's
// currentContext, else the default socket. It fails with an error wrapping
// backend.ErrUnavailable when the daemon does not answer.
func New(ctx context.Context, opts ...Option) (*Backend, error) {
	cfg, err := container.NewConfig(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	profile, err := seccomp.Profile()
	if err != nil {
		return nil, fmt.Errorf("docker: %v: %w", err, backend.ErrUnavailable)
	}
	copts := []client.Opt{client.FromEnv}
	host := cfg.Host
	if host == "" && os.Getenv("DOCKER_HOST") == "" {
		_, h, err := dockerctx.Current()
		if err != nil {
			return nil, fmt.Errorf("docker: %v: %w", err, backend.ErrUnavailable)
		}
		host = h
	}
	if host != "" {
		copts = append(copts, client.WithHost(host))
	}
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker: %v: %w", err, backend.ErrUnavailable)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: cannot reach the Docker daemon at %s (%v); start it (sudo systemctl start docker, or run dockerd), or point DOCKER_HOST at a running one: %w",
			cli.DaemonHost(), err, backend.ErrUnavailable)
	}
	if cfg.Runtime != "" {
		r, err := checkRuntime(ctx, cli, cfg.Runtime)
		if err != nil {
			cli.Close()
			return nil, err
		}
		cfg.RuntimeNoNetwork = slices.Contains(r.Args, "--network=none")
		if cfg.Runtime == "runsc" || filepath.Base(r.Path) == "runsc" {
			cli.Close()
			return nil, fmt.Errorf("docker: runtime %s (%s): %w: %w", cfg.Runtime, r.Path, container.ErrGVisor, container.ErrRuntime)
		}
	}
	// Inside a container, talking to the host's daemon: give it host
	// paths (package internal/hostpath).
	if cfg.HostPaths, err = hostpath.Detect(ctx, func(ctx context.Context, id string) ([]hostpath.Mount, bool, error) {
		r, err := cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil, false, nil
		} else if err != nil {
			return nil, false, err
		}
		var ms []hostpath.Mount
		for _, m := range r.Container.Mounts {
			ms = append(ms, hostpath.Mount{Source: m.Source, Destination: m.Destination})
		}
		return ms, true, nil
	}); err != nil {
		cli.Close()
		return nil, fmt.Errorf("docker: %v: %w", err, backend.ErrUnavailable)
	}
	e := &engine{cli: cli, seccomp: string(profile)}
	return &Backend{Backend: container.NewBackend(e, cfg), e: e}, nil
}

var _ backend.Backend = (*Backend)(nil)

// Name returns "docker".
func (b *Backend) Name() string { return "docker" }

// Close releases the connection to the daemon. It is idempotent.
func (b *Backend) Close() error { return b.e.cli.Close() }

// Info asks the daemon for its version and whether it supports seccomp,
// for `sandbash doctor`.
func (b *Backend) Info(ctx context.Context) (backend.Info, error) {
	v, err := b.e.cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return backend.Info{}, fmt.Errorf("docker: %w", err)
	}
	i, err := b.e.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return backend.Info{}, fmt.Errorf("docker: %w", err)
	}
	sc := "NOT SUPPORTED by the daemon (no name=seccomp in its security options): Docker refuses to start a container with a profile then, so calls fail; run a daemon built with seccomp on a kernel with CONFIG_SECCOMP"
	for _, o := range i.Info.SecurityOptions {
		if strings.HasPrefix(o, "name=seccomp") {
			sc = "sandbash's profile on every container: " + seccomp.ProfileSummary()
		}
	}
	return backend.Info{
		Summary: fmt.Sprintf("Docker %s at %s, API %s (negotiated)", v.Version, b.e.cli.DaemonHost(), b.e.cli.ClientVersion()),
		Details: []string{"seccomp: " + sc, "runtime: " + runtimeLine(b.Config().Runtime, i.Info.DefaultRuntime, i.Info.Runtimes), "paths: " + container.HostPathsLine(b.Config().HostPaths)},
	}, nil
}

// checkRuntime returns how the daemon runs the runtime name, and fails
// when it has none of that name.
func checkRuntime(ctx context.Context, cli *client.Client, name string) (system.RuntimeWithStatus, error) {
	i, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return system.RuntimeWithStatus{}, fmt.Errorf("docker: asking the daemon for its runtimes: %v: %w", err, backend.ErrUnavailable)
	}
	r, ok := i.Info.Runtimes[name]
	if !ok {
		return r, fmt.Errorf("docker: the daemon has no runtime %q (it has %s): register it in /etc/docker/daemon.json (\"runtimes\": {\"%s\": {\"path\": ...}}) and reload dockerd (SIGHUP), or pick one it has: %w: %w",
			name, strings.Join(slices.Sorted(maps.Keys(i.Info.Runtimes)), ", "), name, container.ErrRuntime, backend.ErrUnavailable)
	}
	return r, nil
}

// runtimeLine says which runtime calls run under, and what else the
// daemon offers.
func runtimeLine(chosen, def string, all map[string]system.RuntimeWithStatus) string {
	describe := func(n string) string {
		r := all[n]
		d := fmt.Sprintf("%s (%s)", n, strings.Join(append([]string{r.Path}, r.Args...), " "))
		if n == "runsc" || filepath.Base(r.Path) == "runsc" {
			d += " [gVisor: refused by sandbash, see its README]"
		}
		return d
	}
	var others []string
	for _, n := range slices.Sorted(maps.Keys(all)) {
		if n != chosen && n != def {
			others = append(others, describe(n))
		}
	}
	line := "calls run under the daemon's default runtime, " + describe(def)
	if chosen != "" {
		line = "calls run under " + describe(chosen)
		if r := all[chosen]; slices.Contains(r.Args, "--network=none") {
			line += "; registered to give no network, so the network on is refused"
		}
		line += "; egress rules are refused under it"
	}
	if len(others) > 0 {
		line += "; also registered: " + strings.Join(others, ", ")
	}
	return line
}
