package workspace

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sandbash/sandbash/internal/dockerctx"
)

// socket is a known control-socket location. Pattern is an absolute path
// whose components may hold path.Match wildcards ("/run/user/*/docker.sock").
type socket struct {
	Pattern string
	What    string
}

// knownSockets are the control sockets of container engines and VM managers,
// in their usual places. Every /run/... entry is also checked as /var/run/...
func knownSockets() []socket {
	base := []socket{
		{"/run/docker.sock", "Docker"},
		{"/run/user/*/docker.sock", "rootless Docker"},
		{"/run/docker/containerd/containerd.sock", "Docker's containerd"},
		{"/run/containerd/containerd.sock", "containerd"},
		{"/run/containerd/containerd.sock.ttrpc", "containerd"},
		{"/run/user/*/containerd-rootless/*", "rootless containerd"},
		{"/run/k3s/containerd/containerd.sock", "k3s containerd"},
		{"/var/snap/microk8s/common/run/containerd.sock", "microk8s containerd"},
		{"/run/crio/crio.sock", "CRI-O"},
		{"/run/podman/podman.sock", "Podman"},
		{"/run/user/*/podman/podman.sock", "rootless Podman"},
		{"/run/buildkit/buildkitd.sock", "BuildKit"},
		{"/run/user/*/buildkit/buildkitd.sock", "rootless BuildKit"},
		{"/run/libvirt/*sock*", "libvirt"},
		{"/run/user/*/libvirt/*sock*", "session libvirt"},
		{"/var/lib/lxd/unix.socket", "LXD"},
		{"/var/snap/lxd/common/lxd/unix.socket", "LXD (snap)"},
		{"/var/lib/incus/unix.socket", "Incus"},
	}
	var out []socket
	for _, s := range base {
		out = append(out, s)
		if rest, ok := strings.CutPrefix(s.Pattern, "/run/"); ok {
			out = append(out, socket{"/var/run/" + rest, s.What})
		}
	}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		for _, s := range []socket{
			{".docker/run/docker.sock", "Docker Desktop"},
			{".docker/desktop/docker.sock", "Docker Desktop"},
			{".colima/*/docker.sock", "Colima"},
			{".rd/docker.sock", "Rancher Desktop"},
			{".lima/*/sock/docker.sock", "Lima"},
			{".local/share/containers/podman/machine/*", "Podman machine"},
		} {
			out = append(out, socket{path.Join(filepath.ToSlash(home), s.Pattern), s.What})
		}
	}
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(xdg) {
		for _, s := range []socket{
			{"docker.sock", "rootless Docker"},
			{"podman/podman.sock", "rootless Podman"},
			{"buildkit/buildkitd.sock", "rootless BuildKit"},
			{"containerd-rootless/*", "rootless containerd"},
		} {
			out = append(out, socket{path.Join(xdg, s.Pattern), s.What})
		}
	}
	for _, env := range []string{"DOCKER_HOST", "CONTAINER_HOST"} {
		if p := unixSocketPath(os.Getenv(env)); p != "" {
			out = append(out, socket{p, "the socket " + env + " names"})
		}
	}
	if name, host, err := dockerctx.Current(); err == nil {
		if p := unixSocketPath(host); p != "" {
			out = append(out, socket{p, fmt.Sprintf("the Docker context %q's", name)})
		}
	}
	// Where a pattern's fixed leading directories are a symlink (/var/run ->
	// /run), add the resolved form too, so a resolved mount source matches.
	resolved := resolver{} // what each directory tried resolves to, "" if it does not
	for _, s := range out {
		if r := resolvePrefix(s.Pattern, resolved); r != s.Pattern {
			out = append(out, socket{r, s.What})
		}
	}
	return out
}

// unixSocketPath returns the path of a unix:// address (as DOCKER_HOST and
// CONTAINER_HOST give them), or "" for any other kind of address.
func unixSocketPath(addr string) string {
	if !strings.HasPrefix(addr, "unix://") {
		return ""
	}
	u, err := url.Parse(addr)
	if err != nil || !path.IsAbs(u.Path) {
		return ""
	}
	return path.Clean(u.Path)
}

// resolvePrefix resolves symlinks in the longest wildcard-free leading
// directory of pattern that exists, and re-appends the rest. resolved
// keeps what it found for each directory it tried (the patterns share
// most of them).
func resolvePrefix(pattern string, resolved resolver) string {
	parts := strings.Split(pattern, "/")
	fixed := 0
	for i, p := range parts {
		if strings.ContainsAny(p, "*?[") {
			break
		}
		fixed = i + 1
	}
	for n := fixed; n > 1; n-- {
		if r := resolved.real(strings.Join(parts[:n], "/")); r != "" {
			return path.Join(append([]string{filepath.ToSlash(r)}, parts[n:]...)...)
		}
	}
	return pattern
}

// resolver is filepath.EvalSymlinks of absolute, clean directories, ""
// where it fails, each found once: a directory's is its parent's with its
// own name added, followed if it is a symlink. The patterns' directories
// share their parents, so each costs one lstat rather than one per
// component.
type resolver map[string]string

func (r resolver) real(dir string) string {
	if v, ok := r[dir]; ok {
		return v
	}
	var out string
	parent := "/"
	if d := path.Dir(dir); d != "/" {
		parent = r.real(d)
	}
	if parent != "" {
		p := path.Join(parent, path.Base(dir))
		if fi, err := os.Lstat(p); err == nil {
			out = p
			if fi.Mode()&os.ModeSymlink != 0 {
				out, _ = filepath.EvalSymlinks(p) // "" where it fails
			}
		}
	}
	r[dir] = out
	return out
}

// covers reports whether mounting dir (an absolute, clean path) would expose
// something matching pattern: dir is the match itself or one of its
// ancestors.
func covers(dir, pattern string) bool {
	d := components(dir)
	p := components(pattern)
	if len(d) > len(p) {
		return false
	}
	for i := range d {
		if ok, err := path.Match(p[i], d[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func components(p string) []string {
	p = strings.Trim(path.Clean(p), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}
