//go:build containers_image_openpgp

package main

import (
	"context"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman"
)

var podmanBackend = namedBackend{
	name: "podman",
	open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
		return podman.New(ctx, o.options()...)
	},
}

// podmanEnforcement says which limits b, if a Podman backend, holds per
// call.
func podmanEnforcement(b backend.Backend) (podman.Enforcement, bool) {
	if p, ok := b.(*podman.Backend); ok {
		return p.Enforcement(), true
	}
	return podman.Enforcement{}, false
}
