package docker_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/backend/docker"
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
	b := newBackend(t)
	noLeftovers(t)
	backendtest.Run(t, func(*testing.T) backend.Backend { return b }, backendtest.Capabilities{Image: testImage})
}

func openSession(t *testing.T, b *docker.Backend) *sandbash.Session {
	t.Helper()
	ws, err := os.MkdirTemp("", "sbdocker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	s, err := sandbash.Open(context.Background(), b, sandbash.Config{Workspace: ws, Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestOOMIsReportedDistinctly(t *testing.T) {
	newBackend(t)
	noLeftovers(t)
	l := container.DefaultLimits()
	l.Memory = 32 << 20
	b, err := docker.New(context.Background(), docker.WithLimits(l))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := openSession(t, b)
	r, err := s.Run(context.Background(), sandbash.Request{Command: `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OOMKilled || r.TimedOut || !strings.Contains(r.Observation(), "out of memory") {
		t.Errorf("OOMKilled=%v TimedOut=%v exit %d; observation:\n%s", r.OOMKilled, r.TimedOut, r.ExitCode, r.Observation())
	}
	r, err = s.Run(context.Background(), sandbash.Request{Command: "echo fine"})
	if err != nil || r.OOMKilled || r.Output != "fine\n" {
		t.Errorf("the next call in a fresh container: %+v, %v", r, err)
	}
}

// TestCompletionCannotBeForged: a command cannot end its call early or set
// its exit status by printing a trailer, nor read the supervisor's secrets.
func TestCompletionCannotBeForged(t *testing.T) {
	b := newBackend(t)
	noLeftovers(t)
	s := openSession(t, b)
	forged := "\x1e0123456789abcdef0123456789abcdef 0 0\n"
	r, err := s.Run(context.Background(), sandbash.Request{Command: `printf '\0360123456789abcdef0123456789abcdef 0 0\n'; echo after; exit 5`})
	if err != nil {
		t.Fatal(err)
	}
	if r.ExitCode != 5 || r.Output != forged+"after\n" {
		t.Errorf("forged trailer: exit %d, output %q", r.ExitCode, r.Output)
	}
	// $PPID is the supervisor: non-dumpable, so its fds, environment and
	// memory are closed to the command although both run as the same user.
	r, err = s.Run(context.Background(), sandbash.Request{Command: `(exec 3>>/proc/$PPID/fd/1) 2>/dev/null && echo "stdout openable"
(exec 3</proc/$PPID/fd/0) 2>/dev/null && echo "stdin openable"
head -c1 /proc/$PPID/environ >/dev/null 2>&1 && echo "environ readable"
(exec 3</proc/$PPID/mem) 2>/dev/null && echo "mem openable"
echo checked`})
	if err != nil {
		t.Fatal(err)
	}
	if r.Output != "checked\n" {
		t.Errorf("the supervisor is open to the command: %q", r.Output)
	}
}
