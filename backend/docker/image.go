package docker

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
)

// HasImage reports whether image is on this machine. It never pulls: the
// CLI uses it to refuse an image that only workspace content names, which
// Open would otherwise pull.
func (b *Backend) HasImage(ctx context.Context, image string) (bool, error) {
	_, err := b.cli.ImageInspect(ctx, image)
	switch {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("docker: inspecting image %s: %w", image, err)
}
