//go:build containers_image_openpgp

package podman_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/podman"
	"github.com/sandbash/sandbash/backend/podman/internal/libpod"
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
	if ok, err := connect(t).ImageExists(context.Background(), testImage); err != nil || !ok {
		backendtest.Unavailable(t, "podman", fmt.Errorf("test image %s missing (run make images): %v", testImage, err))
	}
	return b
}

// connect connects to the service the backend uses.
func connect(t *testing.T) *libpod.Client {
	t.Helper()
	b, err := podman.New(context.Background())
	if err != nil {
		backendtest.Unavailable(t, "podman", err)
	}
	b.Close()
	c, err := libpod.New(b.URI())
	if err != nil {
		backendtest.Unavailable(t, "podman", err)
	}
	return c
}

// bridgeGateway is the host's address on Podman's default network, which
// containers with the network on join.
func bridgeGateway(t *testing.T) string {
	if os.Geteuid() != 0 {
		// A rootless service's network lives in the user's namespace:
		// the host has no side on it.
		return ""
	}
	var n struct {
		Subnets []struct {
			Gateway net.IP `json:"gateway"`
		} `json:"subnets"`
	}
	if err := connect(t).Call(context.Background(), http.MethodGet, "/networks/podman/json", nil, nil, &n); err != nil {
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
		list, err := connect(t).ContainerList(context.Background(), map[string][]string{"label": {container.LabelOwner + "=" + container.Owner()}})
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
		// No engine init: the supervisor is PID 1.
		SupervisorIsInit: true,
		Leftovers:        leftovers,
		// A user's own service connects the network through /dev/net/tun;
		// where the user cannot open it, Open refuses the network on.
		NetworkNeedsRoot: os.Geteuid() != 0 && !canOpenTun(),
		// A rootless service on cgroup v1 sets no memory cgroup.
		MemoryPerProcess: !b.Enforcement().Memory,
		MemoryLimited: func(t *testing.T, bytes int64) backend.Backend {
			l := container.DefaultLimits()
			l.Memory = bytes
			return newBackend(t, container.WithLimits(l))
		},
	})
}

// canOpenTun says whether this process can open /dev/net/tun.
func canOpenTun() bool {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err == nil {
		f.Close()
	}
	return err == nil
}

// leftovers lists the containers and volumes a session still has.
func leftovers(t *testing.T, sessionID string) []string {
	c := connect(t)
	f := map[string][]string{"label": {container.LabelSession + "=" + sessionID}}
	cs, err := c.ContainerList(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := c.VolumeList(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ct := range cs {
		out = append(out, "container "+ct.ID[:12])
	}
	for _, v := range vs {
		out = append(out, "volume "+v.Name)
	}
	return out
}

// storedOutput returns what the service keeps of the output of a session's
// containers: what `podman logs` gives, the log file, the journal.
func storedOutput(t *testing.T, sessionID string) string {
	c := connect(t)
	ctx := context.Background()
	cs, err := c.ContainerList(ctx, map[string][]string{"label": {container.LabelSession + "=" + sessionID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) == 0 {
		t.Fatalf("session %s has no container", sessionID)
	}
	var out strings.Builder
	for _, ct := range cs {
		data, err := c.ContainerInspect(ctx, ct.ID)
		if err != nil {
			t.Fatal(err)
		}
		if data.HostConfig == nil || data.HostConfig.LogConfig == nil {
			t.Fatalf("container %.12s: no log configuration in its inspection", ct.ID)
		}
		if typ := data.HostConfig.LogConfig.Type; typ != "none" {
			t.Errorf("container %.12s has log driver %q, want none", ct.ID, typ)
		}
		if p := data.HostConfig.LogConfig.Path; p != "" {
			b, _ := os.ReadFile(p)
			out.Write(b)
		}
		// The service refuses to read logs it does not keep; what it
		// gives is the raw multiplexed stream, headers and all.
		logs, _ := c.Raw(ctx, http.MethodGet, "/containers/"+url.PathEscape(ct.ID)+"/logs", url.Values{"stdout": {"true"}, "stderr": {"true"}}, nil, "")
		out.Write(logs)
		out.WriteString(backendtest.Journal(ct.ID))
	}
	return out.String()
}

// TestOneShot: a session that keeps nothing warm leaves its containers'
// removal to the service (--rm), and nothing remains.
func TestOneShot(t *testing.T) {
	newBackend(t)
	backendtest.OneShot(t, func(t *testing.T) backend.Backend {
		return newBackend(t, container.WithPoolSize(0))
	}, testImage, leftovers)
}

// TestOutputChannel: with the service on a Unix socket, a call's output
// comes through a FIFO whose name is gone before the command starts.
func TestOutputChannel(t *testing.T) {
	b := newBackend(t)
	defer b.Close()
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

// TestAttachFallback: with the service reached over TCP (as if remote,
// here on loopback), the output goes through the attach stream, and the
// output guarantees hold there too.
func TestAttachFallback(t *testing.T) {
	// The service the other tests use (root's, or the user's own in the
	// unprivileged leg), reached over TCP on loopback as if remote.
	local := newBackend(t)
	sock := strings.TrimPrefix(local.URI(), "unix://")
	local.Close()
	uri := backendtest.TCPProxy(t, sock)
	open := func(t *testing.T) backend.Backend { return newBackend(t, podman.WithURI(uri)) }
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

// TestNoEntrypoint: a container runs the supervisor as its command, never
// under the image's ENTRYPOINT (which would run first, with the supervisor
// as its arguments: code of the image's before sandbash's, and a call that
// never starts when the entrypoint does not exec them). The libpod API
// takes a missing entrypoint for the image's; sandbash must send an empty
// one.
func TestNoEntrypoint(t *testing.T) {
	newBackend(t)
	c := connect(t)
	ctx := context.Background()
	// The test image with an ENTRYPOINT that prints and exits, built by
	// the service (a rootless Podman 4.3 service cannot commit: "runroot
	// must be set").
	ref := fmt.Sprintf("localhost/sandbash-test-entrypoint:%d", os.Getpid())
	entrypoint := []string{"echo", "the image's entrypoint ran:"}
	ep, _ := json.Marshal(entrypoint)
	file := fmt.Sprintf("FROM %s\nENTRYPOINT %s\n", testImage, ep)
	var ctxTar bytes.Buffer
	tw := tar.NewWriter(&ctxTar)
	if err := tw.WriteHeader(&tar.Header{Name: "Containerfile", Mode: 0o644, Size: int64(len(file))}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(file))
	tw.Close()
	out, err := c.Raw(ctx, http.MethodPost, "/build", url.Values{"dockerfile": {"Containerfile"}, "t": {ref}}, &ctxTar, "application/x-tar")
	t.Cleanup(func() {
		if err := c.Call(ctx, http.MethodDelete, "/images/remove", url.Values{"images": {ref}, "force": {"true"}}, nil, nil); err != nil {
			t.Errorf("removing %s: %v", ref, err)
		}
	})
	var img struct{ Config struct{ Entrypoint []string } }
	if ierr := c.Call(ctx, http.MethodGet, "/images/"+url.PathEscape(ref)+"/json", nil, nil, &img); err != nil || ierr != nil || !slices.Equal(img.Config.Entrypoint, entrypoint) {
		t.Fatalf("building %s: %v, %v; its entrypoint %q; the build said: %s", ref, err, ierr, img.Config.Entrypoint, out)
	}
	noLeftovers(t)
	for _, pool := range []int{0, 1} {
		b := newBackend(t, container.WithPoolSize(pool))
		s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: t.TempDir(), Image: ref, ParentDir: t.TempDir()})
		if err != nil {
			t.Fatalf("pool %d: %v", pool, err)
		}
		r, err := s.Run(ctx, sandbash.Request{Command: "echo the command ran"})
		s.Close()
		b.Close()
		if err != nil {
			t.Errorf("pool %d: %v", pool, err)
		} else if r.Output != "the command ran\n" {
			t.Errorf("pool %d: %q; want the command's output only", pool, r.Output)
		}
	}
}

// TestServiceErrors: what the service says about a container it does not
// have is a *libpod.Error with the answer's code, 404, and the service's
// own message and cause (its JSON error model, read), which the engine reads as "gone" (Kill, Exists, host path
// detection); a stream attached to it fails, saying so.
func TestServiceErrors(t *testing.T) {
	newBackend(t)
	c := connect(t)
	ctx := context.Background()
	const name = "sandbash-no-such-container"
	_, err := c.ContainerInspect(ctx, name)
	var e *libpod.Error
	if !errors.As(err, &e) || e.ResponseCode != http.StatusNotFound || !libpod.IsNotFound(err) ||
		!strings.Contains(e.Message, name) || strings.HasPrefix(e.Message, "{") || e.Because == "" {
		t.Errorf("inspecting a missing container: %#v, want the service's 404, its message naming it", err)
	}
	if _, err := c.Attach(ctx, name); !libpod.IsNotFound(err) {
		t.Errorf("attaching to a missing container: %v, want a 404", err)
	}
	if ok, err := c.ContainerExists(ctx, name); ok || err != nil {
		t.Errorf("a missing container exists: %v, %v", ok, err)
	}
	if err := c.ContainerRemove(ctx, name); err != nil {
		t.Errorf("removing a missing container (ignore=true): %v", err)
	}
}
