package backendtest

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/overlay"
)

// hashTree fingerprints a host directory: names, modes and contents.
func hashTree(f *fixture, root string) string {
	f.t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := strings.TrimPrefix(p, root) + " " + fi.Mode().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// writeFiles creates files under root, owned like the fixture's
// directories by the workspace owner (a host cache belongs to its user).
func writeFiles(f *fixture, root string, files map[string]string) {
	f.t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	if os.Getuid() == 0 {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, f.uid, f.gid)
		})
		if err != nil {
			f.t.Fatal(err)
		}
	}
}

// mountsMentioning lists mounts, in any process's mount namespace on this
// host, whose line mentions s.
func mountsMentioning(s string) []string {
	var found []string
	paths, _ := filepath.Glob("/proc/[0-9]*/mountinfo")
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, s) {
				found = append(found, p+": "+line)
			}
		}
	}
	return found
}

// testCacheCopyOnWrite: proofs 1 to 3. The host cache is readable, writes
// land in the session's layer (seen by its later calls, not by a concurrent
// session), the host cache is unchanged, and nothing remains after Close.
func testCacheCopyOnWrite(f *fixture) {
	host := f.dir("hostcache")
	writeFiles(f, host, map[string]string{"a.txt": "lower\n", "sub/b.txt": "deep\n"})
	before := hashTree(f, host)
	caches := []overlay.Cache{{Name: "custom", Host: host, Target: "/home/sandbash/.cache/suite"}}
	if f.refused(f.caps.Refuses.Caches, sandbash.Config{Caches: caches}) {
		return
	}
	s1 := f.open(sandbash.Config{Caches: caches})
	s2 := f.open(sandbash.Config{Workspace: f.dir("ws2"), Caches: caches})
	f.expect(s1, "cat ~/.cache/suite/a.txt ~/.cache/suite/sub/b.txt", 0, "lower\ndeep\n")
	f.expect(s1, "echo session > ~/.cache/suite/new.txt && echo changed > ~/.cache/suite/a.txt && rm ~/.cache/suite/sub/b.txt", 0, "")
	f.expect(s1, "cat ~/.cache/suite/new.txt ~/.cache/suite/a.txt; test -e ~/.cache/suite/sub/b.txt || echo removed", 0, "session\nchanged\nremoved\n")
	f.expect(s2, "cat ~/.cache/suite/a.txt ~/.cache/suite/sub/b.txt; test -e ~/.cache/suite/new.txt || echo unseen", 0, "lower\ndeep\nunseen\n")
	if after := hashTree(f, host); after != before {
		f.t.Errorf("the host cache changed:\nbefore\n%s\nafter\n%s", before, after)
	}
	dir, id := s1.Dir(), s1.ID()
	if err := s1.Close(); err != nil {
		f.t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		f.t.Errorf("the session directory (upper and work layers) remains after Close: %v", err)
	}
	if m := mountsMentioning(id); len(m) > 0 {
		f.t.Errorf("mounts of the closed session remain: %v", m)
	}
	if f.caps.Leftovers != nil {
		if left := f.caps.Leftovers(f.t, id); len(left) > 0 {
			f.t.Errorf("objects of the closed session remain: %v", left)
		}
	}
}

// testCacheNarrow: the known caches bring in the artifact directories and
// never the credential or code-running files beside them.
func testCacheNarrow(f *fixture) {
	home := f.dir("home")
	visible := map[string]string{
		".gradle/caches/c.txt": "c", ".gradle/wrapper/dists/d.txt": "d", ".m2/repository/r.txt": "r",
		".cargo/registry/r.txt": "r", ".cargo/git/g.txt": "g", "go/pkg/mod/m.txt": "m",
		".cache/go-build/b.txt": "b", ".npm/_cacache/n.txt": "n", ".cache/pip/p.txt": "p",
	}
	secret := map[string]string{
		".gradle/gradle.properties": "s", ".gradle/init.d/evil.gradle": "s", ".m2/settings.xml": "s",
		".m2/settings-security.xml": "s", ".cargo/credentials.toml": "s", ".cargo/credentials": "s",
		".npmrc": "s", ".config/pip/pip.conf": "s", ".pip/pip.conf": "s", ".netrc": "s",
	}
	writeFiles(f, home, visible)
	writeFiles(f, home, secret)
	caches, err := overlay.Resolve([]string{"all"}, nil, home, func(string) string { return "" })
	if err != nil {
		f.t.Fatal(err)
	}
	if f.refused(f.caps.Refuses.Caches, sandbash.Config{Caches: caches}) {
		return
	}
	s := f.open(sandbash.Config{Caches: caches})
	var cmd strings.Builder
	for name := range visible {
		cmd.WriteString("test -f ~/" + name + " || echo missing " + name + "\n")
	}
	for name := range secret {
		cmd.WriteString("test -e ~/" + name + " && echo exposed " + name + "\n")
	}
	cmd.WriteString("echo checked")
	f.expect(s, cmd.String(), 0, "checked\n")
}

// testGoToolchain: proof 4. With no network, `go build` of a module that
// needs a module found only in the host's module cache succeeds, and the
// build cache it writes stays in the session.
func testGoToolchain(f *fixture) {
	if f.refused(f.caps.Refuses.Caches, sandbash.Config{Caches: []overlay.Cache{{Name: "go", Host: f.dir("gomod-refused"), Target: "/home/sandbash/go/pkg/mod"}}}) {
		return
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if _, err2 := os.Stat("/usr/local/go/bin/go"); err2 != nil {
			f.t.Fatalf("no Go toolchain on the host to prepare the module cache with: %v", err)
		}
		goBin = "/usr/local/go/bin/go"
	}
	// A module proxy on disk holding example.com/greet, and a host module
	// cache filled from it.
	proxy, modcache, gocache, ws := f.dir("proxy"), f.dir("gomod"), f.dir("gobuild"), f.dir("ws")
	modDir := filepath.Join(proxy, "example.com/greet/@v")
	writeFiles(f, modDir, map[string]string{
		"list": "v1.0.0\n", "v1.0.0.info": `{"Version":"v1.0.0"}`, "v1.0.0.mod": "module example.com/greet\n\ngo 1.21\n",
	})
	zf, err := os.Create(filepath.Join(modDir, "v1.0.0.zip"))
	if err != nil {
		f.t.Fatal(err)
	}
	zw := zip.NewWriter(zf)
	for name, body := range map[string]string{
		"go.mod":   "module example.com/greet\n\ngo 1.21\n",
		"greet.go": "package greet\n\nfunc Hello() string { return \"hello from the host's module cache\" }\n",
	} {
		w, _ := zw.Create("example.com/greet@v1.0.0/" + name)
		w.Write([]byte(body))
	}
	zw.Close()
	zf.Close()
	writeFiles(f, ws, map[string]string{
		"go.mod":  "module app\n\ngo 1.21\n\nrequire example.com/greet v1.0.0\n",
		"main.go": "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/greet\"\n)\n\nfunc main() { fmt.Println(greet.Hello()) }\n",
	})
	hostGo := exec.Command(goBin, "mod", "tidy")
	hostGo.Dir = ws
	hostGo.Env = append(os.Environ(), "GOMODCACHE="+modcache, "GOCACHE="+filepath.Join(f.base, "hostgocache"),
		"GOPROXY=file://"+proxy, "GOSUMDB=off", "GOFLAGS=-modcacherw", "GOTOOLCHAIN=local")
	if out, err := hostGo.CombinedOutput(); err != nil {
		f.t.Fatalf("preparing the host module cache: %v\n%s", err, out)
	}
	before := hashTree(f, modcache)

	caches, err := overlay.Known("go", "/nonexistent", func(k string) string {
		return map[string]string{"GOMODCACHE": modcache, "GOCACHE": gocache}[k]
	})
	if err != nil {
		f.t.Fatal(err)
	}
	image := f.caps.GoImage
	if image == "" {
		image = f.caps.Image
	}
	s := f.open(sandbash.Config{Workspace: ws, Image: image, Caches: caches,
		Env: []string{"GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"}})
	r, err := s.Run(f.ctx, sandbash.Request{Command: "export PATH=$PATH:/usr/local/go/bin; go build -o /tmp/app . && /tmp/app", Timeout: 480e9})
	if err != nil {
		f.t.Fatal(err)
	}
	if r.ExitCode != 0 || r.Output != "hello from the host's module cache\n" {
		f.t.Fatalf("go build in the sandbox: exit %d\n%s", r.ExitCode, r.Output)
	}
	f.expect(s, "export PATH=$PATH:/usr/local/go/bin; test -n \"$(ls \"$(go env GOCACHE)\")\" && echo build cache kept", 0, "build cache kept\n")
	if after := hashTree(f, modcache); after != before {
		f.t.Error("the host's module cache changed")
	}
	if entries, _ := os.ReadDir(gocache); len(entries) > 0 {
		f.t.Errorf("the build cache was written to the host: %d entries in %s", len(entries), gocache)
	}
}
