package sandbash

import (
	"errors"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// makeMountPoints makes, in the session's own /tmp and HOME directories,
// the mount points the sandbox needs there (a workspace under /tmp is
// mounted at its host path, inside the sandbox's /tmp). A container engine
// makes the ones it lacks itself, as root: a sandbash that is not root
// could then not remove its own session directory. Made here, they are
// this process's. Best effort: what fails here the engine still makes.
func makeMountPoints(spec *backend.SessionSpec) {
	targets := make([]string, 0, len(spec.Mounts)+len(spec.Overlays))
	for _, m := range spec.Mounts {
		targets = append(targets, m.Target)
	}
	for _, o := range spec.Overlays {
		targets = append(targets, o.Target)
	}
	for _, t := range targets {
		for inside, host := range map[string]string{"/tmp": spec.TmpDir, backend.Home: spec.HomeDir} {
			if rel, ok := strings.CutPrefix(filepath.Clean(t), inside+"/"); ok {
				_ = mkdirBeneath(host, rel)
			}
		}
	}
}

// mkdirBeneath makes rel's directories under root, following no symlink:
// a kept session's /tmp holds what earlier calls left there.
func mkdirBeneath(root, rel string) error {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, c := range strings.Split(rel, "/") {
		if c == "" || c == "." || c == ".." {
			unix.Close(fd)
			return errors.New("sandbash: not a clean relative path: " + rel)
		}
		if err := unix.Mkdirat(fd, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(fd)
			return err
		}
		next, err := unix.Openat(fd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	unix.Close(fd)
	return nil
}
