//go:build !containers_image_openpgp

package main

import (
	"context"
	"fmt"

	"github.com/sandbash/sandbash/backend"
)

// Built without the podman bindings' tags: say how to get the backend.
var podmanBackend = func() containerBackend {
	const how = "this sandbash was built without the podman backend; rebuild with -tags containers_image_openpgp,exclude_graphdriver_btrfs (make build does)"
	err := fmt.Errorf("%s: %w", how, backend.ErrUnavailable)
	return containerBackend{
		name:   "podman",
		open:   func(context.Context, containerOptions) (backend.Backend, error) { return nil, err },
		doctor: func(context.Context) (bool, string) { return false, how },
	}
}()
