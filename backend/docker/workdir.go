package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

// A cache volume is an overlay mount the daemon makes as root. The kernel
// makes the overlay's work directory (<work>/work) root's, mode 0, and
// leaves in it the whiteout it shares among the session's deletions: as a
// user, sandbash could not remove its own session directory. So, for a
// sandbash that is not root, each cache volume remembers the session's
// image, and once the volume is gone a throw-away container of that image
// (as root, no capabilities: the directory's owner needs none) makes the
// directory the user's to remove (mode 0777; the session directory, the
// user's and 0700, keeps everyone else out).

// workCleanup is what freeing one cache volume's work directory needs.
type workCleanup struct {
	image           string // the session's image, by ID
	hostWork, local string // the overlay's workdir, as the daemon and as sandbash see it
	session         string // the session's ID, for the container's labels
}

// rememberWork records, as a user, the work directories of a session's
// cache volumes.
func (e *engine) rememberWork(spec *shared.Spec) {
	if os.Geteuid() == 0 || len(spec.Volumes) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.works == nil {
		e.works = map[string]workCleanup{}
	}
	for _, v := range spec.Volumes {
		local := v.Overlay.Work
		if rest, ok := strings.CutPrefix(local, spec.Dir); ok {
			local = spec.LocalDir + rest
		}
		e.works[v.Name] = workCleanup{image: spec.Image.ID, hostWork: v.Overlay.Work, local: local, session: spec.ID}
	}
}

// freeWork makes the root-owned work directory of the removed volume
// name removable by this user, if sandbash made it (rememberWork) and the
// daemon left one.
func (e *engine) freeWork(ctx context.Context, name string) error {
	e.mu.Lock()
	w, ok := e.works[name]
	delete(e.works, name)
	e.mu.Unlock()
	if !ok {
		return nil
	}
	fi, err := os.Lstat(filepath.Join(w.local, "work"))
	if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		return nil // never mounted, or already ours
	}
	fail := func(err error) error {
		return fmt.Errorf("the cache's work directory %s is root's (the daemon's overlay mount made it), and a container to give it back failed: %w; remove it as root (rm -rf)", w.local, err)
	}
	c, err := e.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config: &container.Config{
			Image:      w.image,
			User:       "0:0",
			Entrypoint: []string{},
			Cmd:        []string{"chmod", "0777", "/w"},
			Labels:     shared.Labels(w.session),
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    "none",
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges", "seccomp=" + e.seccomp},
			ReadonlyRootfs: true,
			LogConfig:      container.LogConfig{Type: "none"},
			Mounts:         []mount.Mount{{Type: mount.TypeBind, Source: filepath.Join(w.hostWork, "work"), Target: "/w"}},
		},
	})
	if err != nil {
		return fail(err)
	}
	// Should this fail, the session's label lets a later GC find it.
	defer func() {
		_, _ = e.cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, client.ContainerRemoveOptions{Force: true})
	}()
	wait := e.cli.ContainerWait(ctx, c.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := e.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return fail(err)
	}
	select {
	case r := <-wait.Result:
		if r.StatusCode != 0 {
			return fail(fmt.Errorf("chmod in image %.19s exited %d", w.image, r.StatusCode))
		}
	case err := <-wait.Error:
		return fail(err)
	}
	return nil
}
