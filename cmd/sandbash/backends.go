package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
)

// containerBackend is a backend that runs calls in container images.
type containerBackend struct {
	name string
	open func(ctx context.Context) (backend.Backend, error)
	// doctor describes the backend's state in one line.
	doctor func(ctx context.Context) (ok bool, line string)
}

// containerBackends, in the order auto tries them.
var containerBackends = []containerBackend{
	notBuilt("docker"),
	notBuilt("podman"),
}

func notBuilt(name string) containerBackend {
	err := fmt.Errorf("the %s backend is not part of this build of sandbash yet; use --backend bwrap: %w", name, backend.ErrUnavailable)
	return containerBackend{
		name:   name,
		open:   func(context.Context) (backend.Backend, error) { return nil, err },
		doctor: func(context.Context) (bool, string) { return false, "not part of this build yet" },
	}
}

// pickBackend resolves --backend. It returns the backend and the image to
// give it ("" for bwrap).
func pickBackend(ctx context.Context, name, image string, stderr io.Writer) (backend.Backend, string, error) {
	switch name {
	case "bwrap":
		b, err := bwrap.New()
		return b, image, err
	case "auto":
		if image == "" {
			b, err := bwrap.New()
			if err == nil {
				fmt.Fprintln(stderr, "sandbash: backend auto: using bwrap (no container image configured; give --image or SANDBASH_IMAGE for docker or podman)")
			}
			return b, "", err
		}
		var why []string
		for _, c := range containerBackends {
			b, err := c.open(ctx)
			if err == nil {
				fmt.Fprintf(stderr, "sandbash: backend auto: using %s with image %s\n", c.name, image)
				return b, image, nil
			}
			why = append(why, fmt.Sprintf("%s: %v", c.name, err))
		}
		b, err := bwrap.New()
		if err != nil {
			return nil, "", fmt.Errorf("no backend works here: %v; bwrap: %w", why, err)
		}
		fmt.Fprintf(stderr, "sandbash: backend auto: using bwrap on the host's own system directories, not image %s, because no container backend answered (%v)\n", image, why)
		return b, "", nil
	}
	for _, c := range containerBackends {
		if c.name == name {
			b, err := c.open(ctx)
			return b, image, err
		}
	}
	return nil, "", fmt.Errorf("--backend %q: use auto, bwrap, docker or podman", name)
}
