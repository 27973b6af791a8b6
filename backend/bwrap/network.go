package bwrap

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/netns"
	"github.com/sandbash/sandbash/internal/sysbin"
)

// Every call gets a network namespace of its own. Under NetworkNone bwrap
// makes it (--unshare-all). Under NetworkOn and NetworkProxy sandbash
// makes it (package internal/netns, as root) and bwrap shares it
// (--share-net) from the launcher thread (keyring.go):
//
//   - NetworkOn: slirp4netns gives it user-mode networking, with the host's
//     loopback out of reach (--disable-host-loopback) and DNS at
//     slirpDNS. It is never the host's namespace, so host loopback services
//     and abstract unix sockets stay out of reach.
//   - NetworkProxy: the namespace has only its loopback, where sandbash's
//     egress proxy listens (backend.ProxyAddr).

// slirpDNS is slirp4netns's DNS forwarder, the sandbox's only nameserver
// under NetworkOn.
const slirpDNS = "10.0.2.3"

// slirpTimeout bounds how long a call waits for slirp4netns to configure
// its namespace.
const slirpTimeout = 10 * time.Second

// callNet is a call's own network namespace and what serves it.
type callNet struct {
	ns    *os.File
	proxy net.Listener
	slirp *exec.Cmd
	exitW *os.File   // slirp4netns exits when this closes
	diag  headBuffer // slirp4netns's stderr
}

// checkNetwork says whether this host can give calls spec's network.
func checkNetwork(spec *backend.SessionSpec, slirp string) error {
	switch spec.Network {
	case backend.NetworkOn, backend.NetworkProxy:
	default:
		return nil
	}
	if os.Geteuid() != 0 && spec.Network == backend.NetworkProxy {
		return fmt.Errorf("bwrap: egress rules give each call a network namespace of its own with only the egress proxy on its loopback, which sandbash creates, and only as root; as uid %d, run sandbash as root, or drop the egress rules (no network, or all of it with Docker or Podman): %w",
			os.Geteuid(), backend.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("bwrap: network %q gives each call a network namespace of its own, which sandbash creates, and only as root; as uid %d, use the Docker or Podman backend, or no network: %w",
			spec.Network, os.Geteuid(), backend.ErrUnavailable)
	}
	if spec.Network == backend.NetworkOn && slirp == "" {
		return fmt.Errorf("bwrap: network on needs slirp4netns, which gives each call user-mode networking in its own namespace (never the host's), and it is not installed; install it (apt-get install slirp4netns): %w", backend.ErrUnavailable)
	}
	return nil
}

// networkInfo says, for doctor, what each network policy gets here.
func (b *Backend) networkInfo() string {
	if os.Geteuid() != 0 {
		return "none: each call's own namespace; on and egress rules: unavailable (sandbash creates each call's network namespace, which needs root)"
	}
	on := "on: each call's own namespace with slirp4netns at " + b.slirp + " (the host's loopback disabled)"
	if b.slirp == "" {
		on = "on: unavailable, slirp4netns is not installed (apt-get install slirp4netns)"
	}
	return "none: each call's own namespace; " + on + "; egress rules: each call's own namespace, with only the proxy on its loopback"
}

// resolvConf is the sandbox's /etc/resolv.conf under NetworkOn.
const resolvConf = "nameserver " + slirpDNS + "\n"

// newCallNet makes the network namespace of one call, and serves it.
func (s *session) newCallNet(c *backend.Call) (*callNet, error) {
	ns, err := netns.New()
	if err != nil {
		return nil, fmt.Errorf("bwrap: making the call's network namespace: %w", err)
	}
	n := &callNet{ns: ns}
	switch s.spec.Network {
	case backend.NetworkProxy:
		if c.Proxy == nil {
			n.close()
			return nil, fmt.Errorf("bwrap: the session's network is the egress proxy, but the call has none to serve")
		}
		if n.proxy, err = netns.Listen(ns, backend.ProxyAddr); err != nil {
			n.close()
			return nil, fmt.Errorf("bwrap: listening for the egress proxy in the call's namespace: %w", err)
		}
		c.Proxy(n.proxy)
	case backend.NetworkOn:
		if err := n.startSlirp(s.b.slirp); err != nil {
			n.close() // before reading diag: slirp4netns is gone
			return nil, fmt.Errorf("bwrap: slirp4netns failed to give the call a network (%v): %s", err, bytes.TrimSpace(n.diag.Bytes()))
		}
	}
	return n, nil
}

// startSlirp starts slirp4netns on the namespace and waits until it has
// configured it.
func (n *callNet) startSlirp(path string) error {
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	exitR, exitW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return err
	}
	n.exitW = exitW
	// fd 3: the namespace, 4: ready, 5: exit.
	//
	// slirp4netns's --enable-sandbox makes a mount namespace, makes only
	// its / private and lazily unmounts the old root after pivot_root: run
	// as root on a host whose mounts are shared, that unmount propagates
	// back, and the host loses mounts under it (container engines' rootfs
	// mounts in /run among them). So it starts in a mount namespace of its
	// own whose mounts are all private (unshare's default).
	unshare, err := sysbin.Find("unshare")
	if err != nil {
		readyW.Close()
		exitR.Close()
		return fmt.Errorf("network on needs unshare (util-linux): %w", err)
	}
	cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", path,
		"--configure", "--mtu=65520", "--disable-host-loopback",
		"--enable-sandbox", "--enable-seccomp", "--ready-fd=4", "--exit-fd=5",
		"--netns-type=path", "/proc/self/fd/3", "tap0")
	cmd.ExtraFiles = []*os.File{n.ns, readyW, exitR}
	cmd.Dir = "/"
	cmd.Env = helperEnv
	cmd.Stderr = &n.diag
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	readyW.Close()
	exitR.Close()
	if err != nil {
		return fmt.Errorf("starting it: %w", err)
	}
	n.slirp = cmd
	ready := make(chan error, 1)
	go func() {
		b, err := bufio.NewReader(readyR).ReadByte()
		if err == nil && b != '1' {
			err = fmt.Errorf("it wrote %q", b)
		}
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-time.After(slirpTimeout):
		err = fmt.Errorf("it did not configure the namespace within %v", slirpTimeout)
	}
	return err
}

// close ends what serves the namespace and lets it go.
func (n *callNet) close() {
	if n == nil {
		return
	}
	if n.proxy != nil {
		n.proxy.Close()
	}
	if n.slirp != nil {
		n.exitW.Close()
		done := make(chan struct{})
		go func() { _ = n.slirp.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			_ = n.slirp.Process.Kill()
			<-done
		}
	} else if n.exitW != nil {
		n.exitW.Close()
	}
	n.ns.Close()
}
