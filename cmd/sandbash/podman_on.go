//go:build containers_image_openpgp

package main

import (
	"context"
	"io"

	"github.com/sirupsen/logrus"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman"
)

// The Podman bindings log through logrus; what they log (a stream that
// ended while the engine went away, say) sandbash reports itself, in its
// own words.
func init() { logrus.SetOutput(io.Discard) }

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
