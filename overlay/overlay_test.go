package overlay

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func noGo(string) string { return "" }

func TestResolve(t *testing.T) {
	home := "/home/alice"
	cs, err := Resolve([]string{"all", "go"}, []string{"/data/models:/home/sandbash/models"}, home, noGo)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, c := range cs {
		targets = append(targets, c.Target)
	}
	for _, want := range []string{"/home/sandbash/.gradle/caches", "/home/sandbash/.m2/repository", "/home/sandbash/go/pkg/mod", "/home/sandbash/.cache/pip", "/home/sandbash/models"} {
		if !slices.Contains(targets, want) {
			t.Errorf("targets %v lack %s", targets, want)
		}
	}
	if n := len(cs); n != 10 {
		t.Errorf("%d caches, want 10 (go listed once)", n)
	}
	env := strings.Join(Env(cs), " ")
	for _, want := range []string{"GOMODCACHE=/home/sandbash/go/pkg/mod", "GOCACHE=/home/sandbash/.cache/go-build", "CARGO_HOME=/home/sandbash/.cargo", "GRADLE_USER_HOME=/home/sandbash/.gradle"} {
		if !strings.Contains(env, want) {
			t.Errorf("env %q lacks %s", env, want)
		}
	}
	// go env locations are honoured.
	cs, _ = Resolve([]string{"go"}, nil, home, func(k string) string { return map[string]string{"GOMODCACHE": "/srv/mod"}[k] })
	if cs[0].Host != "/srv/mod" || cs[1].Host != "/home/alice/.cache/go-build" {
		t.Errorf("go caches: %+v", cs)
	}
	for _, bad := range [][]string{{"rubygems"}} {
		if _, err := Resolve(bad, nil, home, noGo); !errors.Is(err, ErrBadCache) {
			t.Errorf("Resolve(%v) = %v", bad, err)
		}
	}
	for _, bad := range []string{"nocolon", "/x:relative", "/x:/proc/x", "/x:/tmp", "/x:/home/sandbash", ":/y"} {
		if _, err := Resolve(nil, []string{bad}, home, noGo); !errors.Is(err, ErrBadCache) {
			t.Errorf("--cache-dir %q: %v", bad, err)
		}
	}
	if _, err := Resolve(nil, []string{"/a:/home/sandbash/x", "/b:/home/sandbash/x"}, home, noGo); !errors.Is(err, ErrBadCache) {
		t.Errorf("two caches at one target: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	host := t.TempDir()
	os.WriteFile(filepath.Join(host, "x"), []byte("x"), 0o644)
	os.MkdirAll(filepath.Join(dir, "s"), 0o700)
	os.MkdirAll(filepath.Join(dir, "t"), 0o700)
	ovs, err := Prepare(filepath.Join(dir, "s"), []Cache{
		{Name: "custom", Host: host, Target: "/home/sandbash/a"},
		{Name: "custom", Host: filepath.Join(host, "missing"), Target: "/home/sandbash/b"},
	}, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	if ovs[0].Lower != host || !strings.HasSuffix(ovs[1].Lower, "/empty") {
		t.Errorf("lowers: %q %q", ovs[0].Lower, ovs[1].Lower)
	}
	for _, o := range ovs {
		for _, p := range []string{o.Upper, o.Work, Merged(o)} {
			if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
				t.Errorf("%s: %v", p, err)
			}
		}
		if want := "lowerdir=" + o.Lower + ",upperdir=" + o.Upper + ",workdir=" + o.Work; Options(o) != want {
			t.Errorf("Options = %q", Options(o))
		}
	}
	comma := filepath.Join(dir, "a,b")
	os.Mkdir(comma, 0o755)
	if _, err := Prepare(filepath.Join(dir, "t"), []Cache{{Name: "custom", Host: comma, Target: "/home/sandbash/c"}}, 0, 0); !errors.Is(err, ErrBadCache) {
		t.Errorf("a comma in the lower path: %v", err)
	}
}

// TestHostGoEnvIgnoresWorkspace: the host's go runs outside the workspace,
// so a go.mod or go.work there that asks for another toolchain (which go
// would download and run on the host) has no effect, and the user's own
// settings (GOMODCACHE here) still do.
func TestHostGoEnvIgnoresWorkspace(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "go.mod"), []byte("module example.com/evil\n\ngo 1.99\n\ntoolchain go1.99.0\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "go.work"), []byte("go 1.99\n\ntoolchain go1.99.0\n\nuse .\n"), 0o644)
	mod := filepath.Join(t.TempDir(), "mod")
	t.Chdir(ws)
	t.Setenv("GOTOOLCHAIN", "auto")
	t.Setenv("GOPROXY", "off") // a download attempt fails at once, offline
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOMODCACHE", mod)
	if got := HostGoEnv("GOMODCACHE"); got != mod {
		t.Errorf("HostGoEnv(GOMODCACHE) = %q, want %q", got, mod)
	}
}

func TestGoEnvCommand(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH")
	}
	ws := t.TempDir()
	t.Chdir(ws)
	t.Setenv("GOTOOLCHAIN", "auto")
	t.Setenv("GOFLAGS", "-mod=mod")
	t.Setenv("GOPROXY", "https://proxy.example")
	t.Setenv("GOWORK", filepath.Join(ws, "go.work"))
	t.Setenv("GOMODCACHE", "/srv/mod")
	cmd, err := GoEnvCommand(t.Context(), "GOMODCACHE")
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Dir != "/" {
		t.Errorf("Dir = %q, want / (outside the workspace)", cmd.Dir)
	}
	env := strings.Join(cmd.Env, "\n") + "\n"
	for _, want := range []string{"GOTOOLCHAIN=local\n", "GOWORK=off\n", "GOMODCACHE=/srv/mod\n", "PATH="} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	for _, bad := range []string{"GOTOOLCHAIN=auto", "GOFLAGS", "GOPROXY", "GOWORK=/"} {
		if strings.Contains(env, bad) {
			t.Errorf("env has %q:\n%s", bad, env)
		}
	}
	if !filepath.IsAbs(cmd.Path) {
		t.Errorf("go found at %q, not an absolute path", cmd.Path)
	}
}
