package ctrbackend_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/docker"
	"github.com/sandbash/sandbash/internal/ctrbackend"
)

// TestHeldExit: the container of a call that ended by itself does not exit
// at its trailer while its removal is held (back-to-back calls; see
// Later): its exit is work for the engine (on Podman, a cleanup process
// as costly as a start), which waits with the removal. Once nothing holds
// it, the removal ends and removes it, and nothing is left. On Docker,
// whose containers' states are cheap to read; the code is the engines'
// shared lifecycle.
func TestHeldExit(t *testing.T) {
	ctx := context.Background()
	b, err := docker.New(ctx, docker.WithPoolSize(1))
	if err != nil {
		backendtest.Unavailable(t, "docker", err)
	}
	defer b.Close()
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const image = "sandbash-test:latest"
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		backendtest.Unavailable(t, "docker", err)
	}
	states := func() []string {
		t.Helper()
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{
			All:     true,
			Filters: make(client.Filters).Add("label", ctrbackend.LabelOwner+"="+ctrbackend.Owner()),
		})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list.Items {
			out = append(out, string(c.State))
		}
		slices.Sort(out)
		return out
	}
	release := ctrbackend.HoldRemovals(b.Backend)
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: t.TempDir(), Image: image})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Run(ctx, sandbash.Request{Command: "echo done"})
	if err != nil || r.Output != "done\n" {
		t.Fatalf("the call: %+v, %v", r, err)
	}
	// The supervisor exits by itself 3 s after its last heartbeat; before
	// that, only a closed stdin ends it. Besides the call's, the pool holds
	// one or two warm containers (it grew if the call found none ready).
	time.Sleep(time.Second)
	held := states()
	if len(held) < 2 || slices.ContainsFunc(held, func(s string) bool { return s != "running" }) {
		t.Fatalf("a second after the call, with its removal held: containers %v, want the call's and the warm ones running", held)
	}
	release()
	released = true
	deadline := time.Now().Add(ctrbackend.LaterDelay + 5*time.Second)
	for got := states(); len(got) != len(held)-1; got = states() {
		if time.Now().After(deadline) {
			t.Fatalf("after the hold ended: containers %v, want the %d warm ones only", got, len(held)-1)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := states(); len(got) != 0 {
		t.Fatalf("after Close: containers %v", got)
	}
}
