package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	shared "github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/internal/owner"
)

// GC removes every sandbash-labelled container and volume whose owning
// process has exited (a sandbash killed mid-call, say) and ran as this
// process's uid, or any uid's with all. Objects of live owners, of owners
// out of sight (another host or PID namespace) and of other users are left
// alone. It returns what it
// removed, as "container <id>" and "volume <name>".
func (b *Backend) GC(ctx context.Context, all bool) ([]string, error) {
	var removed []string
	var errs []error
	filter := make(client.Filters).Add("label", shared.LabelSession)
	cs, err := b.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
	if err != nil {
		return nil, fmt.Errorf("docker: listing sandbash containers: %w", err)
	}
	for _, c := range cs.Items {
		if !owner.Collectable(c.Labels[shared.LabelOwner], all) {
			continue
		}
		_, err := b.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if cerrdefs.IsConflict(err) {
			// The daemon is already removing it (auto-remove): wait, so
			// that what gc reports gone is gone.
			err = b.waitGone(ctx, c.ID)
		}
		switch {
		case err == nil, cerrdefs.IsNotFound(err):
			removed = append(removed, "container "+c.ID[:12])
		default:
			errs = append(errs, fmt.Errorf("docker: removing container %.12s: %w", c.ID, err))
		}
	}
	vs, err := b.cli.VolumeList(ctx, client.VolumeListOptions{Filters: filter})
	if err != nil {
		return removed, errors.Join(append(errs, fmt.Errorf("docker: listing sandbash volumes: %w", err))...)
	}
	for _, v := range vs.Items {
		if !owner.Collectable(v.Labels[shared.LabelOwner], all) {
			continue
		}
		if _, err := b.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("docker: removing volume %s: %w", v.Name, err))
			continue
		}
		removed = append(removed, "volume "+v.Name)
	}
	return removed, errors.Join(errs...)
}

// waitGone waits until a container being removed is gone, for up to 10 s.
func (b *Backend) waitGone(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := b.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("docker: container %.12s is still being removed: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitExited waits until a container is no longer running (its state,
// OOMKilled included, is then final).
func (b *Backend) waitExited(ctx context.Context, id string) error {
	res := b.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-res.Result:
		return nil
	case err := <-res.Error:
		return err
	}
}
