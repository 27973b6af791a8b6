//go:build containers_image_openpgp

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/sirupsen/logrus"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman"
)

// The Podman bindings log through logrus; what they log (a stream that
// ended while the engine went away, say) sandbash reports itself, in its
// own words.
func init() { logrus.SetOutput(io.Discard) }

var podmanBackend = containerBackend{
	name: "podman",
	open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
		return podman.New(ctx, o.options()...)
	},
	doctor: func(ctx context.Context) (bool, string) {
		b, err := podman.New(ctx)
		if err != nil {
			return false, err.Error()
		}
		info, err := b.Info(ctx)
		if err != nil {
			return false, err.Error()
		}
		return true, fmt.Sprintf("Podman %s at %s, API %s\n        seccomp: %s", info.ServerVersion, info.URI, info.APIVersion, info.Seccomp)
	},
}
