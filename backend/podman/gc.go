//go:build containers_image_openpgp

package podman

import (
	"context"
	"errors"
	"fmt"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/volumes"

	shared "github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/internal/owner"
)

// GC removes every sandbash-labelled container and volume whose owning
// process has exited and ran as this process's uid (any uid's with all);
// see the Docker backend's GC.
func (b *Backend) GC(ctx context.Context, all bool) ([]string, error) {
	c, cancel := b.with(ctx)
	defer cancel()
	filter := map[string][]string{"label": {shared.LabelSession}}
	cs, err := containers.List(c, new(containers.ListOptions).WithAll(true).WithFilters(filter))
	if err != nil {
		return nil, fmt.Errorf("podman: listing sandbash containers: %w", err)
	}
	var removed []string
	var errs []error
	for _, ct := range cs {
		if !owner.Collectable(ct.Labels[shared.LabelOwner], all) {
			continue
		}
		_, err := containers.Remove(c, ct.ID, new(containers.RemoveOptions).WithForce(true).WithIgnore(true).WithVolumes(true).WithTimeout(0))
		if err != nil {
			errs = append(errs, fmt.Errorf("podman: removing container %.12s: %w", ct.ID, err))
			continue
		}
		removed = append(removed, "container "+ct.ID[:12])
	}
	vs, err := volumes.List(c, new(volumes.ListOptions).WithFilters(filter))
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("podman: listing sandbash volumes: %w", err))...)
	}
	for _, v := range vs {
		if !owner.Collectable(v.Labels[shared.LabelOwner], all) {
			continue
		}
		if err := volumes.Remove(c, v.Name, new(volumes.RemoveOptions).WithForce(true)); err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("podman: removing volume %s: %w", v.Name, err))
			continue
		}
		removed = append(removed, "volume "+v.Name)
	}
	return removed, errors.Join(errs...)
}
