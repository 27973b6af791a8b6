package ctrbackend

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/netns"
)

// Under backend.NetworkProxy a container has no network (the engine's
// "none": its own loopback only), and sandbash, as root, creates the egress
// proxy's listener on that loopback from a thread that has joined the
// container's network namespace (package internal/netns). Each warm
// container gets its listener when it is prepared; the call it serves
// gets it at Start.

// checkProxy says whether the session's containers can get the proxy.
func checkProxy(name string, sp *backend.SessionSpec, cfg Config) error {
	if sp.Network == backend.NetworkOn && cfg.RuntimeNoNetwork {
		return fmt.Errorf("%s: the runtime %s is registered with the engine to give containers no network (a network=none argument in its runtimeArgs), so a session with the network on would get none: register a second runtime without that argument and pick that one, or use the engine's default runtime for this session: %w: %w",
			name, cfg.Runtime, ErrRuntime, backend.ErrSetup)
	}
	if sp.Network != backend.NetworkProxy {
		return nil
	}
	if cfg.HostPaths != nil {
		return fmt.Errorf("%s: egress rules cannot work here: sandbash runs in container %.12s and the engine outside it, and it gives each call's container the egress proxy by making a listener in that container's network namespace, which it cannot reach from its own container; run sandbash on the engine's host, or drop the egress rules: %w",
			name, cfg.HostPaths.ID, backend.ErrSetup)
	}
	if cfg.Runtime != "" {
		// A runtime with a network stack of its own (gVisor's netstack,
		// a Kata VM's kernel) never sees a socket made in the
		// container's network namespace on the host.
		return fmt.Errorf("%s: egress rules cannot work under the runtime %s: sandbash gives each container the egress proxy by making a listener in the container's network namespace on the host, and that runtime runs the container's network stack on its own (gVisor's netstack, a VM's kernel), which never sees it; use the engine's default runtime, or no egress rules: %w: %w",
			name, cfg.Runtime, ErrRuntime, backend.ErrSetup)
	}
	if os.Geteuid() == 0 {
		return nil
	}
	return fmt.Errorf("%s: egress rules need sandbash to run as root with this backend: it gives each container the egress proxy on its own loopback by joining the container's network namespace, which only root can; run sandbash as root, or without egress rules (no network, or all of it): %w",
		name, backend.ErrUnavailable)
}

// listenIn makes the proxy's listener in container id's network namespace.
// It checks that the process the engine named is that container's (its
// cgroup names the container), so that an engine on another host, or a
// process that died and whose pid was reused, cannot point it elsewhere.
func listenIn(ctx context.Context, e Engine, id string) (net.Listener, error) {
	pid, err := e.Pid(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("finding the container's process: %w", err)
	}
	if pid <= 0 {
		return nil, fmt.Errorf("the engine gave no process for the container")
	}
	ns, err := netns.Open(pid)
	if err != nil {
		return nil, fmt.Errorf("opening the container's network namespace: %w", err)
	}
	defer ns.Close()
	// Checked after the namespace is open: had the pid been reused
	// before, the new process's cgroup fails the check.
	cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(cg), id) {
		return nil, fmt.Errorf("process %d, which the engine named as the container's, is not in its cgroup: is the engine on another host? Egress rules need the engine on this host", pid)
	}
	return netns.Listen(ns, backend.ProxyAddr)
}
