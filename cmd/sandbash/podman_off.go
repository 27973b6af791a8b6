//go:build !containers_image_openpgp

package main

import (
	"context"
	"fmt"

	"github.com/sandbash/sandbash/backend"
)

// Built without the podman backend's tags: say how to get the backend.
var podmanBackend = func() namedBackend {
	err := fmt.Errorf("this sandbash was built without the podman backend; rebuild with -tags containers_image_openpgp,exclude_graphdriver_btrfs (make build does): %w", backend.ErrUnavailable)
	return namedBackend{
		name: "podman",
		open: func(context.Context, containerOptions) (backend.Backend, error) { return nil, err },
	}
}()

// podmanEnforcement: no Podman backend in this build.
func podmanEnforcement(backend.Backend) (struct {
	Memory, Pids, CPU bool
	Summary           string
}, bool) {
	return struct {
		Memory, Pids, CPU bool
		Summary           string
	}{}, false
}
