// Package sysbin finds the host programs sandbash runs itself (bwrap,
// unshare, nsenter, slirp4netns) in the system's directories only, never
// through the caller's PATH: sandbash is often started from the workspace
// with a PATH that names directories in it (an activated .venv/bin,
// node_modules/.bin under npm run, direnv's PATH_add), which calls can
// write, and a bwrap found there would run on the host, as the caller
// (root, often) and outside every sandbox.
package sysbin

import (
	"fmt"
	"os"
	"path/filepath"
)

// Dirs are where Find looks, in order.
const Dirs = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Find returns the path of the executable regular file name in Dirs.
func Find(name string) (string, error) {
	for _, d := range filepath.SplitList(Dirs) {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not in %s (sandbash runs the programs it needs from the system's directories only, never from $PATH, which may name directories of the workspace)", name, Dirs)
}
