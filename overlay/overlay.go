// Package overlay gives each session copy-on-write dependency caches.
//
// Agents rebuild constantly, and downloading the world every session is
// slow; but a writable shared cache lets one poisoned session poison every
// later build. So the host's cache is the read-only lower layer of an
// overlay, each session gets its own upper layer, writes persist across the
// session's calls (the second build is warm), and when the session closes
// the upper layer is discarded: the host cache is never modified.
//
// The known caches are deliberately narrow: only the directories that hold
// downloaded artifacts enter the sandbox, never the files next to them that
// hold credentials or run code (gradle.properties, init.d, settings.xml,
// settings-security.xml, ~/.cargo/credentials*, .npmrc, pip.conf, .netrc).
//
// This does not defend against a project's own build files: a build that
// runs code runs it in the sandbox, with the session's caches.
package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/review"
	"github.com/sandbash/sandbash/workspace"
)

// ErrBadCache is returned for a cache name or directory that cannot be used.
var ErrBadCache = errors.New("bad cache")

// Cache is one host directory shared copy-on-write into sandboxes.
type Cache struct {
	// Name is the cache's name: "go", "maven", ... or "custom".
	Name string
	// Host is the host directory: the read-only lower layer. If it does
	// not exist, the cache starts empty.
	Host string
	// Target is where it appears in the sandbox.
	Target string
	// Env are variables that point tools at Target.
	Env []string
}

// Names are the known caches, in the order "all" lists them.
var Names = []string{"gradle", "maven", "cargo", "go", "npm", "pip"}

// Known returns the known caches named name for a host user whose home is
// home, with targets under the sandbox's HOME. goEnv reads a `go env`
// variable ("" if unknown).
func Known(name, home string, goEnv func(string) string) ([]Cache, error) {
	h := func(p string) string { return filepath.Join(home, p) }
	s := func(p string) string { return path.Join(backend.Home, p) }
	switch name {
	case "gradle":
		// GRADLE_USER_HOME is the sandbox's own ~/.gradle: only these two
		// directories come from the host, never gradle.properties or init.d.
		return []Cache{
			{Name: "gradle", Host: h(".gradle/caches"), Target: s(".gradle/caches"), Env: []string{"GRADLE_USER_HOME=" + s(".gradle")}},
			{Name: "gradle", Host: h(".gradle/wrapper/dists"), Target: s(".gradle/wrapper/dists")},
		}, nil
	case "maven":
		return []Cache{{Name: "maven", Host: h(".m2/repository"), Target: s(".m2/repository")}}, nil
	case "cargo":
		return []Cache{
			{Name: "cargo", Host: h(".cargo/registry"), Target: s(".cargo/registry"), Env: []string{"CARGO_HOME=" + s(".cargo")}},
			{Name: "cargo", Host: h(".cargo/git"), Target: s(".cargo/git")},
		}, nil
	case "go":
		mod, build := goEnv("GOMODCACHE"), goEnv("GOCACHE")
		if mod == "" {
			mod = h("go/pkg/mod")
		}
		if build == "" || build == "off" {
			build = h(".cache/go-build")
		}
		return []Cache{
			{Name: "go", Host: mod, Target: s("go/pkg/mod"), Env: []string{"GOMODCACHE=" + s("go/pkg/mod")}},
			{Name: "go", Host: build, Target: s(".cache/go-build"), Env: []string{"GOCACHE=" + s(".cache/go-build")}},
		}, nil
	case "npm":
		return []Cache{{Name: "npm", Host: h(".npm/_cacache"), Target: s(".npm/_cacache"), Env: []string{"npm_config_cache=" + s(".npm")}}}, nil
	case "pip":
		return []Cache{{Name: "pip", Host: h(".cache/pip"), Target: s(".cache/pip"), Env: []string{"PIP_CACHE_DIR=" + s(".cache/pip")}}}, nil
	}
	return nil, fmt.Errorf("overlay: unknown cache %q; known: %s, or all (or a directory of your own as HOST:SANDBOX): %w", name, strings.Join(Names, ", "), ErrBadCache)
}

// HostGoEnv reads a variable of the host's `go env`, or "" without Go (or
// when go fails or takes longer than goEnvTimeout). See GoEnvCommand for
// how go runs.
func HostGoEnv(key string) string {
	ctx, cancel := context.WithTimeout(context.Background(), goEnvTimeout)
	defer cancel()
	cmd, err := GoEnvCommand(ctx, key)
	if err != nil {
		return ""
	}
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

const goEnvTimeout = 10 * time.Second

// goEnvPassed are the variables of sandbash's environment that go env
// sees: where the user's go, its settings file and its caches are. They
// are the user's own configuration; the workspace's is left out.
var goEnvPassed = []string{"PATH", "HOME", "USER", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "GOENV", "GOROOT", "GOPATH", "GOMODCACHE", "GOCACHE"}

// GoEnvCommand is `go env KEY...` as sandbash runs it on the host, where a
// crafted go.mod or go.work must not reach it: sandbash usually runs in the
// workspace, and go run there with GOTOOLCHAIN=auto downloads and runs
// the toolchain the workspace's go.mod asks for. So it runs in / (no
// module), with GOTOOLCHAIN=local and GOWORK=off, and an environment of
// only goEnvPassed: no GOFLAGS, GOPROXY or other variable that could
// change what go does beyond reporting. The user's go env file
// (go env -w) still applies: it is the user's, not the workspace's.
//
// go is found on the current PATH, as a shell would, but never through a
// relative entry (exec.LookPath refuses those). PATH is passed on so that
// version-manager shims, which are scripts, still find what they run.
func GoEnvCommand(ctx context.Context, keys ...string) (*exec.Cmd, error) {
	bin, err := exec.LookPath("go")
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"env"}, keys...)...)
	cmd.Dir = "/"
	cmd.Env = []string{"GOTOOLCHAIN=local", "GOWORK=off"}
	for _, k := range goEnvPassed {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.WaitDelay = time.Second
	return cmd, nil
}

// Resolve turns --cache names ("all" for every known cache) and --cache-dir
// HOST:SANDBOX entries into caches. Relative host paths are taken from the
// current directory; sandbox paths must be absolute.
func Resolve(names, dirs []string, home string, goEnv func(string) string) ([]Cache, error) {
	var out []Cache
	for _, n := range names {
		want := []string{n}
		if n == "all" {
			want = Names
		}
		for _, w := range want {
			if slices.ContainsFunc(out, func(c Cache) bool { return c.Name == w }) {
				continue
			}
			if home == "" {
				return nil, fmt.Errorf("overlay: cache %s: no home directory to find it in: %w", w, ErrBadCache)
			}
			cs, err := Known(w, home, goEnv)
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
	}
	for _, d := range dirs {
		host, target, ok := strings.Cut(d, ":")
		if !ok || host == "" || !path.IsAbs(target) {
			return nil, fmt.Errorf("overlay: cache directory %q: give HOST:SANDBOX, with an absolute SANDBOX path: %w", d, ErrBadCache)
		}
		abs, err := filepath.Abs(host)
		if err != nil {
			return nil, fmt.Errorf("overlay: cache directory %q: %v: %w", d, err, ErrBadCache)
		}
		out = append(out, Cache{Name: "custom", Host: abs, Target: path.Clean(target)})
	}
	for i, c := range out {
		if err := checkTarget(c.Target); err != nil {
			return nil, err
		}
		for _, o := range out[:i] {
			if o.Target == c.Target {
				return nil, fmt.Errorf("overlay: two caches at %s: %w", c.Target, ErrBadCache)
			}
		}
	}
	return out, nil
}

func checkTarget(t string) error {
	for _, r := range []string{"/proc", "/dev", "/sys"} {
		if t == r || strings.HasPrefix(t, r+"/") {
			return fmt.Errorf("overlay: cache target %s is inside %s, which the sandbox provides itself: %w", t, r, ErrBadCache)
		}
	}
	if t == "/" || t == "/tmp" || t == backend.Home {
		return fmt.Errorf("overlay: cache target %s would cover the sandbox's own / , /tmp or HOME; give a directory below it: %w", t, ErrBadCache)
	}
	return nil
}

// Env returns the variables that point tools at the caches.
func Env(caches []Cache) []string {
	var env []string
	for _, c := range caches {
		env = append(env, c.Env...)
	}
	return env
}

// Prepare creates each cache's upper and work directories under dir (the
// session's own directory), owned by uid:gid, and returns the overlays.
// A missing host directory gets an empty lower layer. Paths that would
// break overlayfs's option string (commas, colons) are refused.
func Prepare(dir string, caches []Cache, uid, gid int) ([]backend.Overlay, error) {
	var out []backend.Overlay
	if len(caches) > 0 {
		// Traversable, like the session directory, by a sandbox running
		// as the workspace owner; each cache's own directory is its.
		if err := os.Mkdir(filepath.Join(dir, "caches"), 0o711); err != nil && !os.IsExist(err) {
			return nil, fmt.Errorf("overlay: %w", err)
		}
	}
	for i, c := range caches {
		base := filepath.Join(dir, "caches", fmt.Sprintf("%d-%s", i, c.Name))
		o := backend.Overlay{Name: c.Name, Lower: c.Host, Upper: filepath.Join(base, "upper"), Work: filepath.Join(base, "work"), Target: c.Target}
		if fi, err := os.Stat(c.Host); err != nil || !fi.IsDir() {
			o.Lower = filepath.Join(base, "empty")
		} else if real, err := filepath.EvalSymlinks(c.Host); err == nil {
			o.Lower = real
		}
		for _, p := range []string{o.Lower, o.Upper, o.Work} {
			if strings.ContainsAny(p, ",:") {
				return nil, fmt.Errorf("overlay: cache %s: the path %s holds a comma or colon, which overlayfs mount options cannot carry; move the cache or the temporary directory (TMPDIR): %w", c.Name, p, ErrBadCache)
			}
		}
		if err := workspace.CheckSource(o.Lower); err != nil {
			return nil, fmt.Errorf("overlay: cache %s: %w", c.Name, err)
		}
		for _, p := range []string{base, o.Upper, o.Work, filepath.Join(base, "empty"), filepath.Join(base, "merged")} {
			if err := os.MkdirAll(p, 0o700); err != nil {
				return nil, fmt.Errorf("overlay: cache %s: %w", c.Name, err)
			}
			if os.Geteuid() == 0 {
				if err := os.Chown(p, uid, gid); err != nil {
					return nil, fmt.Errorf("overlay: cache %s: %w", c.Name, err)
				}
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// Options is the overlayfs mount option string for o. A workspace's
// overlay (overlay mode) also gets review.MountOptions: its layers must
// say, read as plain directories, what the session changed.
func Options(o backend.Overlay) string {
	lower := strings.Join(append(slices.Clone(o.Layers), o.Lower), ":")
	opts := "lowerdir=" + lower + ",upperdir=" + o.Upper + ",workdir=" + o.Work
	if o.Workspace {
		opts += "," + review.MountOptions
	}
	return opts
}

// Merged is where a backend that mounts o itself puts the mount (next to
// the upper layer, in the session's directory).
func Merged(o backend.Overlay) string { return filepath.Join(filepath.Dir(o.Upper), "merged") }
