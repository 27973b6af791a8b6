//go:build containers_image_openpgp

package podman

import (
	"context"
	"fmt"

	"github.com/containers/podman/v5/pkg/bindings/images"
)

// HasImage reports whether image is on this machine. It never pulls: the
// CLI uses it to refuse an image that only workspace content names, which
// Open would otherwise pull.
func (b *Backend) HasImage(ctx context.Context, image string) (bool, error) {
	c, cancel := b.with(ctx)
	defer cancel()
	ok, err := images.Exists(c, image, nil)
	if err != nil {
		return false, fmt.Errorf("podman: looking for image %s: %w", image, err)
	}
	return ok, nil
}
