//go:build containers_image_openpgp

package main

import (
	"context"
	"fmt"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

func init() {
	engines["podman"] = func(ctx context.Context, image string) (backend.Backend, []string, error) {
		b, err := podman.New(ctx)
		l := container.DefaultLimits()
		// Podman fails to start containers here without explicit rlimits.
		cli := []string{"podman", "run", "--rm", "--network", "none",
			"--ulimit", fmt.Sprintf("nofile=%d:%d", l.NoFile, l.NoFile),
			"--ulimit", fmt.Sprintf("nproc=%d:%d", l.NProc, l.NProc), image, "true"}
		return b, cli, err
	}
}
