package docker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/moby/moby/client"

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
	backendtest.Run(t, func(*testing.T) backend.Backend { return b }, backendtest.Capabilities{
		Image:      testImage,
		GoImage:    "sandbash-test-go:latest",
		Supervised: true,
		SuidBinds:  true,
		Leftovers:  leftovers,
		MemoryLimited: func(t *testing.T, bytes int64) backend.Backend {
			l := container.DefaultLimits()
			l.Memory = bytes
			b, err := docker.New(context.Background(), docker.WithLimits(l))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		},
	})
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
