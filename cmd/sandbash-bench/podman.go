//go:build containers_image_openpgp

package main

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

func init() {
	extraTargets["podman"] = func(ctx context.Context, image string) (*target, error) {
		p, err := podman.New(ctx)
		if err != nil {
			return nil, err
		}
		p.Close()
		l := container.DefaultLimits()
		return &target{
			name: "podman", image: image,
			open: func(ctx context.Context, pool int) (backend.Backend, error) {
				return podman.New(ctx, podman.WithPoolSize(pool))
			},
			ref: func(argv ...string) *exec.Cmd {
				// Podman fails to start containers here without explicit rlimits.
				return exec.Command("podman", append([]string{"run", "--rm", "--network", "none",
					"--ulimit", fmt.Sprintf("nofile=%d:%d", l.NoFile, l.NoFile),
					"--ulimit", fmt.Sprintf("nproc=%d:%d", l.NProc, l.NProc), image}, argv...)...)
			},
			refName: "podman run --rm --network none",
			close:   func() {},
		}, nil
	}
}
