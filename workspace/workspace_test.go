package workspace

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandbash/sandbash/backend"
)

func TestCheckPathsRefusesSockets(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///srv/custom/engine.sock")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	socks := knownSockets()
	refused := []string{
		"/", "/run", "/var/run", "/var", "/run/docker.sock", "/var/run/docker.sock",
		"/run/containerd", "/run/containerd/containerd.sock", "/run/crio/crio.sock",
		"/run/podman", "/run/user", "/run/user/1000", "/run/user/1000/podman/podman.sock",
		"/run/user/4242/docker.sock", "/run/buildkit", "/run/libvirt/libvirt-sock",
		"/run/libvirt/virtqemud-sock", "/var/lib/lxd", "/var/snap/lxd/common/lxd/unix.socket",
		"/srv/custom", "/srv/custom/engine.sock", "/srv",
	}
	for _, p := range refused {
		if err := checkPaths(p, p, socks); !errors.Is(err, ErrControlSocket) {
			t.Errorf("checkPaths(%q) = %v, want ErrControlSocket", p, err)
		}
	}
	allowed := []string{"/usr", "/home/alice/project", "/run/user/1000/other", "/var/lib/apt", "/srv/other", "/opt"}
	for _, p := range allowed {
		if err := checkPaths(p, p, socks); err != nil {
			t.Errorf("checkPaths(%q) = %v, want nil", p, err)
		}
	}
	// A harmless-looking path that resolves to a socket directory is refused,
	// and the message says where it leads.
	err := checkPaths("/home/alice/project/link", "/run/docker.sock", socks)
	if !errors.Is(err, ErrControlSocket) || !strings.Contains(err.Error(), "leads to /run/docker.sock") {
		t.Errorf("symlinked path: got %v", err)
	}
}

func TestCheckSourceFollowsSymlinks(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "engine.sock")
	t.Setenv("DOCKER_HOST", "unix://"+fake)
	l, err := net.Listen("unix", fake)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	link := filepath.Join(dir, "innocent")
	if err := os.Symlink(fake, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fake, link, dir} {
		if err := CheckSource(p); !errors.Is(err, ErrControlSocket) {
			t.Errorf("CheckSource(%s) = %v, want ErrControlSocket", p, err)
		}
	}
}

func TestCheckSourceRefusesAnySocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "agent.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := CheckSource(sock); !errors.Is(err, ErrSocket) {
		t.Errorf("CheckSource(socket) = %v, want ErrSocket", err)
	}
	if err := CheckSource("relative/path"); !errors.Is(err, ErrBadPath) {
		t.Errorf("CheckSource(relative) = %v, want ErrBadPath", err)
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	ro := filepath.Join(root, "vendor")
	rw := t.TempDir()
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	ms, err := Resolve(Config{Root: root, Readable: []string{ro}, Writable: []string{rw}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 || ms[0] != (backend.Mount{Source: root, Target: root}) {
		t.Fatalf("mounts = %+v", ms)
	}
	for _, m := range ms[1:] {
		if m.Target == ro && !m.ReadOnly || m.Target == rw && m.ReadOnly {
			t.Errorf("wrong mode: %+v", m)
		}
	}
}

func TestResolveRefusals(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	file := filepath.Join(home, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	cases := []struct {
		name string
		cfg  Config
		want error
	}{
		{"root workspace", Config{Root: "/"}, ErrTooBroad},
		{"home workspace", Config{Root: home}, ErrTooBroad},
		{"home writable", Config{Root: ws, Writable: []string{home}}, ErrTooBroad},
		{"missing workspace", Config{Root: filepath.Join(ws, "nope")}, ErrBadPath},
		{"file workspace", Config{Root: file}, ErrBadPath},
		{"empty workspace", Config{Root: " "}, ErrBadPath},
		{"proc readable", Config{Root: ws, Readable: []string{"/proc/self"}}, ErrReserved},
		{"tmp writable", Config{Root: ws, Writable: []string{"/tmp"}}, ErrReserved},
		{"duplicate", Config{Root: ws, Readable: []string{ws}}, ErrBadPath},
		{"run readable", Config{Root: ws, Readable: []string{"/run"}}, ErrControlSocket},
	}
	for _, c := range cases {
		if _, err := Resolve(c.cfg); !errors.Is(err, c.want) {
			t.Errorf("%s: Resolve = %v, want %v", c.name, err, c.want)
		}
	}
}

// TestResolveRefusesPlantedSymlinks: a path that reaches its target
// through a symlink inside a read-write mount is refused, whether it is
// named inside that mount or reaches it through a symlink of the user's;
// symlinks elsewhere, and the path the symlink leads to, are fine.
func TestResolveRefusesPlantedSymlinks(t *testing.T) {
	ws, other, third := t.TempDir(), t.TempDir(), t.TempDir()
	ws, _ = filepath.EvalSymlinks(ws)
	other, _ = filepath.EvalSymlinks(other)
	for _, d := range []string{filepath.Join(ws, "sub"), filepath.Join(other, "target")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	planted := filepath.Join(ws, "sub", "out")
	if err := os.Symlink(filepath.Join(other, "target"), planted); err != nil {
		t.Fatal(err)
	}
	users := filepath.Join(other, "link")
	if err := os.Symlink(planted, users); err != nil {
		t.Fatal(err)
	}
	fine := filepath.Join(other, "fine")
	if err := os.Symlink(filepath.Join(other, "target"), fine); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{
		{Root: ws, Writable: []string{planted}},
		{Root: ws, Readable: []string{planted}},
		{Root: ws, Readable: []string{users}},
		{Root: third, Writable: []string{ws}, Readable: []string{users}},
	} {
		if _, err := Resolve(cfg); !errors.Is(err, ErrBadPath) || !strings.Contains(err.Error(), planted) {
			t.Errorf("Resolve(%+v) = %v; want a refusal naming %s", cfg, err, planted)
		}
	}
	for _, cfg := range []Config{
		{Root: ws, Readable: []string{fine}},
		{Root: ws, Writable: []string{filepath.Join(other, "target")}},
		{Root: other, Readable: []string{planted}},
	} {
		if _, err := Resolve(cfg); err != nil {
			t.Errorf("Resolve(%+v) = %v; want it accepted", cfg, err)
		}
	}
}

// FuzzCheckPaths checks the socket rule against a simple reference: any path
// equal to or above a known socket location must be refused.
func FuzzCheckPaths(f *testing.F) {
	for _, s := range []string{"/", "/run", "/var/run/../run/docker.sock", "//run//podman/", "/run/user/0", "/home/x", "/run/user/1000/buildkit", "/var/lib/lxd/"} {
		f.Add(s)
	}
	socks := knownSockets()
	f.Fuzz(func(t *testing.T, p string) {
		clean := filepath.Clean("/" + p)
		err := checkPaths(clean, clean, socks)
		for _, s := range socks {
			lit := strings.NewReplacer("*", "1000").Replace(s.Pattern)
			if lit == clean || clean == "/" || strings.HasPrefix(lit, clean+"/") {
				if !errors.Is(err, ErrControlSocket) {
					t.Fatalf("%q covers %s but was accepted", clean, lit)
				}
				return
			}
		}
	})
}

// TestResolverIsEvalSymlinks: the resolver that finds the known sockets'
// resolved directories, one lstat per directory, says what
// filepath.EvalSymlinks says of each: through symlinked directories
// (absolute, relative, chained), and "" for what does not exist, a
// dangling symlink, or a path below a file.
func TestResolverIsEvalSymlinks(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"real/run/user", "real/lib/lxd", "other"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{
		"var":              base + "/real",
		"real/varrun":      "run",
		"real/run/chain":   "../varrun/user",
		"real/run/dangles": base + "/nowhere",
		"other/up":         "../real/lib",
	} {
		if err := os.Symlink(to, filepath.Join(base, link)); err != nil {
			t.Fatal(err)
		}
	}
	r := resolver{}
	for _, p := range []string{
		"var", "var/run", "var/run/user", "var/varrun/user", "var/run/chain", "var/run/chain/x",
		"var/run/dangles", "var/run/dangles/x", "var/lib/lxd", "other/up/lxd", "other/up/none",
		"file", "file/x", "nowhere", "nowhere/deeper",
	} {
		p = filepath.Join(base, p)
		want, err := filepath.EvalSymlinks(p)
		if err != nil {
			want = ""
		}
		if got := r.real(p); got != want {
			t.Errorf("resolver.real(%s) = %q, want %q (filepath.EvalSymlinks)", p, got, want)
		}
	}
}
