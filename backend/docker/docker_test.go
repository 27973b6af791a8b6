package docker_test

import (
	"context"
	"errors"
	"fmt"
	cerrdefs "github.com/containerd/errdefs"
	"io"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/docker"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// testImage is built by `make images`.
const testImage = "sandbash-test:latest"

func newBackend(t *testing.T) *docker.Backend {
	t.Helper()
	b, err := docker.New(context.Background())
	if err != nil {
		backendtest.Unavailable(t, "docker", err)
	}
	t.Cleanup(func() { b.Close() })
	cli, err := client.New(client.FromEnv)
	if err == nil {
		defer cli.Close()
		if _, err := cli.ImageInspect(context.Background(), testImage); err != nil {
			backendtest.Unavailable(t, "docker", fmt.Errorf("test image %s missing (run make images): %w", testImage, err))
		}
	}
	return b
}

// noLeftovers fails the test if any container this process created still
// exists when the test ends (cleanups run after all parallel subtests).
func noLeftovers(t *testing.T) {
	t.Cleanup(func() {
		cli, err := client.New(client.FromEnv)
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
			All:     true,
			Filters: make(client.Filters).Add("label", container.LabelOwner+"="+container.Owner()),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list.Items {
			t.Errorf("container left behind: %s %v (%s)", c.ID[:12], c.Names, c.State)
		}
	})
}

func TestConformance(t *testing.T) {
	newBackend(t) // or skip: no engine, or no test image
	noLeftovers(t)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := docker.New(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, backendtest.Capabilities{
		Image:         testImage,
		BridgeGateway: bridgeGateway(t),
		GoImage:       "sandbash-test-go:latest",
		GitImage:      "sandbash-test-git:2",
		EnvImage:      "sandbash-test-env:2",
		StoredOutput:  storedOutput,
		Supervised:    true,
		// No engine init: the supervisor is PID 1.
		SupervisorIsInit: true,
		SuidBinds:        true,
		Leftovers:        leftovers,
		MemoryLimited: func(t *testing.T, bytes int64) backend.Backend {
			l := container.DefaultLimits()
			l.Memory = bytes
			b, err := docker.New(context.Background(), container.WithLimits(l))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
}

// bridgeGateway is the host's address on Docker's default bridge, which
// containers with the network on join.
func bridgeGateway(t *testing.T) string {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	n, err := cli.NetworkInspect(context.Background(), "bridge", client.NetworkInspectOptions{})
	if err != nil {
		t.Fatalf("inspecting the default bridge: %v", err)
	}
	for _, c := range n.Network.IPAM.Config {
		if c.Gateway.Is4() {
			return c.Gateway.String()
		}
	}
	// A daemon that made its bridge itself (the first start on a fresh
	// machine) names no gateway in the IPAM configuration: the bridge
	// interface's own address is the gateway then.
	name := n.Network.Options["com.docker.network.bridge.name"]
	if name == "" {
		name = "docker0"
	}
	if iface, err := net.InterfaceByName(name); err == nil {
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	t.Fatalf("the default bridge has no IPv4 gateway: neither in its IPAM configuration %+v nor on its interface %s", n.Network.IPAM.Config, name)
	return ""
}

// leftovers lists the containers and volumes a session still has.
func leftovers(t *testing.T, sessionID string) []string {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f := make(client.Filters).Add("label", container.LabelSession+"="+sessionID)
	cs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := cli.VolumeList(context.Background(), client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs.Items {
		out = append(out, "container "+c.ID[:12])
	}
	for _, v := range vs.Items {
		out = append(out, "volume "+v.Name)
	}
	return out
}

// storedOutput returns what the daemon keeps of the output of a session's
// containers: what `docker logs` gives, the log file, the journal.
func storedOutput(t *testing.T, sessionID string) string {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", container.LabelSession+"="+sessionID)})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Items) == 0 {
		t.Fatalf("session %s has no container", sessionID)
	}
	var out strings.Builder
	inspected := 0
	for _, c := range cs.Items {
		r, err := cli.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue // a call's container, removed between list and inspect
		}
		if err != nil {
			t.Fatal(err)
		}
		inspected++
		if typ := r.Container.HostConfig.LogConfig.Type; typ != "none" {
			t.Errorf("container %.12s has log driver %q, want none", c.ID, typ)
		}
		if p := r.Container.LogPath; p != "" {
			b, _ := os.ReadFile(p)
			out.Write(b)
		}
		// The daemon refuses to read logs it does not keep.
		if logs, err := cli.ContainerLogs(ctx, c.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true}); err == nil {
			_, _ = io.Copy(&out, logs)
			logs.Close()
		}
		out.WriteString(backendtest.Journal(c.ID))
	}
	if inspected == 0 {
		t.Errorf("session %s: every container was removed before it could be inspected", sessionID)
	}
	return out.String()
}

// TestRuntime: --runtime names the daemon's runtime every container of the
// session runs under; a runtime the daemon does not have is refused at
// New, naming those it has.
func TestRuntime(t *testing.T) {
	newBackend(t)
	noLeftovers(t)
	if _, err := docker.New(context.Background(), docker.WithRuntime("sandbash-no-such-runtime")); !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "runc") {
		t.Errorf("an unknown runtime: %v; want ErrUnavailable naming the runtimes the daemon has", err)
	}
	b, err := docker.New(context.Background(), docker.WithRuntime("runc"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: t.TempDir(), Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Run(context.Background(), sandbash.Request{Command: "echo ran"}); err != nil || r.Output != "ran\n" {
		t.Fatalf("a call under --runtime runc: %v, %+v", err, r)
	}
	// The warm container waiting for the next call.
	if err := s.WaitWarm(context.Background()); err != nil {
		t.Fatal(err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cs, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", container.LabelSession+"="+s.ID())})
	if err != nil || len(cs.Items) == 0 {
		t.Fatalf("the session's containers: %v, %v", cs.Items, err)
	}
	inspected := 0
	for _, c := range cs.Items {
		r, err := cli.ContainerInspect(context.Background(), c.ID, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			continue // the last call's container, removed meanwhile
		}
		if err != nil {
			t.Fatal(err)
		}
		inspected++
		if rt := r.Container.HostConfig.Runtime; rt != "runc" {
			t.Errorf("container %.12s runs under %q, want runc (--runtime)", c.ID, rt)
		}
	}
	if inspected == 0 {
		t.Error("no container of the session was left to inspect: the warm one is missing")
	}
}

// TestOneShot: a session that keeps nothing warm leaves its containers'
// removal to the daemon (AutoRemove), and nothing remains.
func TestOneShot(t *testing.T) {
	newBackend(t)
	backendtest.OneShot(t, func(t *testing.T) backend.Backend {
		b, err := docker.New(context.Background(), docker.WithPoolSize(0))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, testImage, leftovers)
}

// TestOutputChannel: with the daemon on a Unix socket, a call's output
// comes through a FIFO whose name is gone before the command starts.
func TestOutputChannel(t *testing.T) {
	b := newBackend(t)
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: t.TempDir(), Image: testImage, ParentDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Run(context.Background(), sandbash.Request{Command: "readlink /proc/self/fd/1; ls -A /run/sandbash-out"})
	if err != nil || r.Output != "/run/sandbash-out/out (deleted)\n" {
		t.Errorf("the command's stdout: %q, %v; want the channel, its name removed", r.Output, err)
	}
}

// TestAttachFallback: with the daemon reached over TCP (as if remote,
// here on loopback), the output goes through the attach stream, and the
// output guarantees hold there too.
func TestAttachFallback(t *testing.T) {
	newBackend(t)
	host := backendtest.TCPProxy(t, "/var/run/docker.sock")
	open := func(t *testing.T) backend.Backend {
		b, err := docker.New(context.Background(), docker.WithHost(host))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := open(t)
	defer b.Close()
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: t.TempDir(), Image: testImage, ParentDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Run(context.Background(), sandbash.Request{Command: "test -e /run/sandbash-out && echo channel || echo attach"})
	s.Close()
	if err != nil || r.Output != "attach\n" {
		t.Fatalf("over TCP: %q, %v; want the attach stream", r.Output, err)
	}
	backendtest.RunOutput(t, open, backendtest.Capabilities{Image: testImage, Supervised: true, SupervisorIsInit: true, Leftovers: leftovers})
}
