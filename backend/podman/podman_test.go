//go:build containers_image_openpgp

package podman_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/network"
	"github.com/containers/podman/v5/pkg/bindings/volumes"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/podman"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// testImage is built by `make images`.
const testImage = "localhost/sandbash-test:latest"

func newBackend(t *testing.T, opts ...container.Option) *podman.Backend {
	t.Helper()
	b, err := podman.New(context.Background(), opts...)
	if err != nil {
		backendtest.Unavailable(t, "podman", err)
	}
	conn := connect(t)
	if ok, err := images.Exists(conn, testImage, nil); err != nil || !ok {
		backendtest.Unavailable(t, "podman", fmt.Errorf("test image %s missing (run make images): %v", testImage, err))
	}
	return b
}

// connect connects to the service the backend uses.
func connect(t *testing.T) context.Context {
	t.Helper()
	b, err := podman.New(context.Background())
	if err != nil {
		backendtest.Unavailable(t, "podman", err)
	}
	b.Close()
	conn, err := bindings.NewConnection(context.Background(), b.URI())
	if err != nil {
		backendtest.Unavailable(t, "podman", err)
	}
	return conn
}

// bridgeGateway is the host's address on Podman's default network, which
// containers with the network on join.
func bridgeGateway(t *testing.T) string {
	if os.Geteuid() != 0 {
		// A rootless service's network lives in the user's namespace:
		// the host has no side on it.
		return ""
	}
	n, err := network.Inspect(connect(t), "podman", nil)
	if err != nil {
		t.Fatalf("inspecting the default network: %v", err)
	}
	for _, s := range n.Subnets {
		if g := s.Gateway.To4(); g != nil {
			return g.String()
		}
	}
	t.Fatalf("the default network has no IPv4 gateway: %+v", n.Subnets)
	return ""
}

// noLeftovers fails the test if a container this process created still
// exists when the test ends.
func noLeftovers(t *testing.T) {
	t.Cleanup(func() {
		list, err := containers.List(connect(t), new(containers.ListOptions).WithAll(true).
			WithFilters(map[string][]string{"label": {container.LabelOwner + "=" + container.Owner()}}))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			t.Errorf("container left behind: %s %v (%s)", c.ID[:12], c.Names, c.State)
		}
	})
}

func TestConformance(t *testing.T) {
	b := newBackend(t) // or skip: no engine, or no test image
	noLeftovers(t)
	t.Logf("limits: %s", b.Enforcement().Summary)
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		b, err := podman.New(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}, backendtest.Capabilities{
		Image:         testImage,
		BridgeGateway: bridgeGateway(t),
		GoImage:       "localhost/sandbash-test-go:latest",
		GitImage:      "localhost/sandbash-test-git:2",
		EnvImage:      "localhost/sandbash-test-env:2",
		StoredOutput:  storedOutput,
		Supervised:    true,
		Leftovers:     leftovers,
		// A rootless service on cgroup v1 sets no memory cgroup.
		MemoryPerProcess: !b.Enforcement().Memory,
		MemoryLimited: func(t *testing.T, bytes int64) backend.Backend {
			l := container.DefaultLimits()
			l.Memory = bytes
			return newBackend(t, container.WithLimits(l))
		},
	})
}

// leftovers lists the containers and volumes a session still has.
func leftovers(t *testing.T, sessionID string) []string {
	conn := connect(t)
	f := map[string][]string{"label": {container.LabelSession + "=" + sessionID}}
	cs, err := containers.List(conn, new(containers.ListOptions).WithAll(true).WithFilters(f))
	if err != nil {
		t.Fatal(err)
	}
	vs, err := volumes.List(conn, new(volumes.ListOptions).WithFilters(f))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cs {
		out = append(out, "container "+c.ID[:12])
	}
	for _, v := range vs {
		out = append(out, "volume "+v.Name)
	}
	return out
}

// storedOutput returns what the service keeps of the output of a session's
// containers: what `podman logs` gives, the log file, the journal.
func storedOutput(t *testing.T, sessionID string) string {
	conn := connect(t)
	cs, err := containers.List(conn, new(containers.ListOptions).WithAll(true).
		WithFilters(map[string][]string{"label": {container.LabelSession + "=" + sessionID}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatalf("session %s has no container", sessionID)
	}
	var out strings.Builder
	for _, c := range cs {
		data, err := containers.Inspect(conn, c.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if data.HostConfig == nil || data.HostConfig.LogConfig == nil {
			t.Fatalf("container %.12s: no log configuration in its inspection", c.ID)
		}
		if typ := data.HostConfig.LogConfig.Type; typ != "none" {
			t.Errorf("container %.12s has log driver %q, want none", c.ID, typ)
		}
		if p := data.HostConfig.LogConfig.Path; p != "" {
			b, _ := os.ReadFile(p)
			out.Write(b)
		}
		// The service refuses to read logs it does not keep.
		lines := make(chan string)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for l := range lines {
				out.WriteString(l)
			}
		}()
		_ = containers.Logs(conn, c.ID, new(containers.LogOptions).WithStdout(true).WithStderr(true), lines, lines)
		close(lines)
		<-done
		out.WriteString(backendtest.Journal(c.ID))
	}
	return out.String()
}
