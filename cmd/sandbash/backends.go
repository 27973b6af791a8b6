package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/backend/docker"
	"github.com/sandbash/sandbash/devcontainer"
)

// containerOptions configure a backend: limits apply to bwrap too.
type containerOptions struct {
	limits   container.Limits
	progress io.Writer
	// oneShot: the session runs one call, so nothing is kept warm.
	oneShot bool
}

// containerBackend is a backend that runs calls in container images.
type containerBackend struct {
	name   string
	open   func(ctx context.Context, o containerOptions) (backend.Backend, error)
	doctor func(ctx context.Context) (ok bool, line string)
}

// collector is a backend that can remove what dead sandbash processes left.
type collector interface {
	GC(ctx context.Context) ([]string, error)
}

// containerBackends, in the order auto tries them.
var containerBackends = []containerBackend{
	{
		name: "docker",
		open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
			pool := 1
			if o.oneShot {
				pool = 0
			}
			return docker.New(ctx, docker.WithLimits(o.limits), docker.WithProgress(o.progress), docker.WithPoolSize(pool))
		},
		doctor: func(ctx context.Context) (bool, string) {
			b, err := docker.New(ctx)
			if err != nil {
				return false, err.Error()
			}
			defer b.Close()
			info, err := b.Info(ctx)
			if err != nil {
				return false, err.Error()
			}
			return true, fmt.Sprintf("Docker %s at %s, API %s (negotiated)", info.ServerVersion, info.Host, info.APIVersion)
		},
	},
	podmanBackend, // podman_on.go, or podman_off.go when built without its tags
}

// imageChoice is the configured image and where it came from.
type imageChoice struct{ ref, source string }

// resolveImage finds the image: --image, else SANDBASH_IMAGE, else the
// workspace's devcontainer.json.
func resolveImage(flag, env, ws string) (imageChoice, error) {
	switch {
	case flag != "":
		return imageChoice{flag, "--image"}, nil
	case env != "":
		return imageChoice{env, "SANDBASH_IMAGE"}, nil
	}
	img, file, err := devcontainer.Image(ws)
	switch {
	case err == nil:
		return imageChoice{img, file}, nil
	case errors.Is(err, devcontainer.ErrNoImage) && file == "":
		return imageChoice{}, nil
	}
	return imageChoice{}, err
}

// pickBackend resolves --backend. It returns the backend and the image to
// give it ("" for bwrap).
func pickBackend(ctx context.Context, name string, img imageChoice, o containerOptions, stderr io.Writer) (backend.Backend, string, error) {
	switch name {
	case "bwrap":
		if img.source == "--image" {
			return nil, "", fmt.Errorf("--image %s: bwrap runs on the host's own /usr and takes no image; drop --image, or pick --backend docker or podman", img.ref)
		}
		b, err := bwrap.New(bwrap.WithLimits(o.limits))
		return b, "", err
	case "auto":
		if img.ref == "" {
			b, err := bwrap.New(bwrap.WithLimits(o.limits))
			if err == nil {
				fmt.Fprintln(stderr, "sandbash: backend auto: using bwrap (no container image configured; give --image, SANDBASH_IMAGE or a devcontainer.json image for docker or podman)")
			}
			return b, "", err
		}
		var why []string
		for _, c := range containerBackends {
			b, err := c.open(ctx, o)
			if err == nil {
				fmt.Fprintf(stderr, "sandbash: backend auto: using %s with image %s (from %s)\n", c.name, img.ref, img.source)
				return b, img.ref, nil
			}
			why = append(why, fmt.Sprintf("%s: %v", c.name, err))
		}
		b, err := bwrap.New(bwrap.WithLimits(o.limits))
		if err != nil {
			return nil, "", fmt.Errorf("no backend works here: %v; bwrap: %w", why, err)
		}
		fmt.Fprintf(stderr, "sandbash: backend auto: using bwrap on the host's own system directories, not image %s, because no container backend answered (%v)\n", img.ref, why)
		return b, "", nil
	}
	for _, c := range containerBackends {
		if c.name == name {
			b, err := c.open(ctx, o)
			return b, img.ref, err
		}
	}
	return nil, "", fmt.Errorf("--backend %q: use auto, bwrap, docker or podman", name)
}
