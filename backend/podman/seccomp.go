//go:build containers_image_openpgp

package podman

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/seccomp"
)

// writeProfile writes sandbash's seccomp profile (package internal/seccomp)
// into the session's directory, where the service reads it when it creates
// a container (the libpod API takes a profile only as a path). The service
// must see the session's directory anyway: /tmp and HOME are bind mounts
// from it. It goes with the session's directory.
func writeProfile(sessionDir string) (string, error) {
	if sessionDir == "" {
		return "", fmt.Errorf("the session has no directory to keep its seccomp profile in: %w", backend.ErrSetup)
	}
	profile, err := seccomp.Profile()
	if err != nil {
		return "", fmt.Errorf("%v: %w", err, backend.ErrUnavailable)
	}
	dir := filepath.Join(sessionDir, "seccomp")
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("keeping the seccomp profile: %w", err)
	}
	path := filepath.Join(dir, "profile.json")
	if err := os.WriteFile(path, profile, 0o600); err != nil {
		return "", fmt.Errorf("writing the seccomp profile: %w", err)
	}
	return path, nil
}
