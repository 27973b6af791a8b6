package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/backend/docker"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// containerOptions configure a backend: limits apply to bwrap too.
type containerOptions struct {
	limits   container.Limits
	progress io.Writer
	// oneShot: the session runs one call, so nothing is kept warm.
	oneShot bool
	// runtime is --runtime: the container engine's OCI runtime (on
	// Kubernetes, the RuntimeClass of pods with the network on).
	runtime string
	// namespace and claim are --namespace and --claim (Kubernetes), and
	// workspace the path with which it finds the claim in its own pod.
	namespace, claim, workspace string
}

// options are the container backends' options for o: nothing is kept warm
// for a one-shot session.
func (o containerOptions) options() []container.Option {
	pool := 1
	if o.oneShot {
		pool = 0
	}
	return []container.Option{container.WithLimits(o.limits), container.WithProgress(o.progress), container.WithPoolSize(pool), container.WithRuntime(o.runtime)}
}

// bwrapOptions are bwrap's options for o: a one-shot session skips the
// no-op sandboxes that only make setup errors come early.
func (o containerOptions) bwrapOptions() []bwrap.Option {
	return []bwrap.Option{bwrap.WithLimits(o.limits), bwrap.WithOneShot(o.oneShot)}
}

// namedBackend is a backend by the name users select it by, and how to open it.
type namedBackend struct {
	name string
	open func(ctx context.Context, o containerOptions) (backend.Backend, error)
}

// containerBackends, in the order auto tries them.
var containerBackends = []namedBackend{
	{
		name: "docker",
		open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
			return docker.New(ctx, o.options()...)
		},
	},
	podmanBackend, // podman_on.go, or podman_off.go when built without its tags
}

// allBackends are every backend, bwrap first, as gc and doctor visit them.
func allBackends() []namedBackend {
	bw := namedBackend{name: "bwrap", open: func(_ context.Context, o containerOptions) (backend.Backend, error) {
		return bwrap.New(o.bwrapOptions()...)
	}}
	return append([]namedBackend{bw}, containerBackends...)
}

// imageChoice is the configured image and where it came from. A CLI
// session keeps it, as JSON, for its later runs.
type imageChoice struct {
	Ref    string `json:"ref,omitempty"`
	Source string `json:"source,omitempty"`
	// Workspace: only the workspace's devcontainer.json names the image,
	// so it is never pulled (see prepared.checkImage).
	Workspace bool `json:"workspace,omitempty"`
}

// resolveImage finds the image: --image, else SANDBASH_IMAGE, else the
// workspace's devcontainer.json as the user approved it (see trust.go).
// For --backend bwrap, which takes no image, the file is not even read.
func resolveImage(flag, env, ws, backendName string) (imageChoice, error) {
	switch {
	case flag != "":
		return imageChoice{Ref: flag, Source: "--image"}, nil
	case env != "":
		return imageChoice{Ref: env, Source: "SANDBASH_IMAGE"}, nil
	case backendName == "bwrap":
		return imageChoice{}, nil
	}
	return workspaceImage(ws)
}

// engines opens and closes each container backend: the names of those
// that answer, and why each other one does not.
func engines(ctx context.Context, o containerOptions) (answer, why []string) {
	for _, c := range containerBackends {
		b, err := c.open(ctx, o)
		if err != nil {
			why = append(why, fmt.Sprintf("%s: %v", c.name, err))
			continue
		}
		b.Close()
		answer = append(answer, c.name)
	}
	return answer, why
}

// pickBackend resolves --backend. A backend that runs images
// (backend.ImageRunner) is given img; bwrap is not.
func pickBackend(ctx context.Context, name string, img imageChoice, o containerOptions, stderr io.Writer) (backend.Backend, error) {
	if o.runtime != "" && (name == "bwrap" || name == "auto" && img.Ref == "") {
		return nil, fmt.Errorf("--runtime %s: bwrap runs no container runtime; pick --backend docker or podman with an image (--image), or drop --runtime", o.runtime)
	}
	switch name {
	case "bwrap":
		if img.Source == "--image" {
			return nil, fmt.Errorf("--image %s: bwrap runs on the host's own /usr and takes no image; drop --image, or pick --backend docker or podman", img.Ref)
		}
		return bwrap.New(o.bwrapOptions()...)
	case "auto":
		if img.Ref == "" {
			b, err := bwrap.New(o.bwrapOptions()...)
			if err == nil {
				fmt.Fprintln(stderr, "sandbash: backend auto: using bwrap (no container image configured; give --image, SANDBASH_IMAGE or a devcontainer.json image for docker or podman)")
				return b, nil
			}
			if !errors.Is(err, backend.ErrUnavailable) {
				return nil, err
			}
			// bwrap cannot work here: say whether an engine could.
			answer, why := engines(ctx, o)
			if len(answer) > 0 {
				return nil, fmt.Errorf("backend auto: %w; %s answers here, but auto has no image to run there: give an image (--image, SANDBASH_IMAGE or devcontainer.json) so auto can use %s",
					err, strings.Join(answer, " and "), strings.Join(answer, " or "))
			}
			return nil, fmt.Errorf("backend auto: no backend works here: %w; and no container engine answers either (%s)", err, strings.Join(why, "; "))
		}
		var why []string
		for _, c := range containerBackends {
			b, err := c.open(ctx, o)
			if err == nil {
				fmt.Fprintf(stderr, "sandbash: backend auto: using %s with image %s (from %s)\n", c.name, img.Ref, img.Source)
				return b, nil
			}
			why = append(why, fmt.Sprintf("%s: %v", c.name, err))
		}
		if o.runtime != "" {
			return nil, fmt.Errorf("--runtime %s: no container backend answered (%v), and bwrap, the fallback, runs no container runtime: start Docker or Podman, or drop --runtime", o.runtime, why)
		}
		b, err := bwrap.New(o.bwrapOptions()...)
		if err != nil {
			return nil, fmt.Errorf("backend auto: no backend works here: %s; and bwrap, the fallback without an engine: %w", strings.Join(why, "; "), err)
		}
		fmt.Fprintf(stderr, "sandbash: backend auto: using bwrap on the host's own system directories, not image %s, because no container backend answered (%v)\n", img.Ref, why)
		return b, nil
	}
	for _, c := range append(containerBackends, kubernetesBackend) {
		if c.name == name {
			return c.open(ctx, o)
		}
	}
	return nil, fmt.Errorf("--backend %q: use auto, bwrap, docker, podman or kubernetes", name)
}
