package devcontainer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, ErrNotFound) {
		t.Errorf("no file: %v", err)
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, ErrNotFound) {
		t.Errorf("no workspace: %v", err)
	}
	write(t, dir, ".devcontainer.json", `{"image": "root-level"}`)
	body := `{
		// the team's image
		"name": "dev",
		"image": "mcr.example/dev:1", /* pinned */
		"features": {},
	}`
	write(t, dir, ".devcontainer/devcontainer.json", body)
	f, err := Read(dir)
	sum := sha256.Sum256([]byte(body))
	if err != nil || f.Image != "mcr.example/dev:1" || f.Path != filepath.Join(dir, ".devcontainer/devcontainer.json") || f.Sum != hex.EncodeToString(sum[:]) {
		t.Errorf("Read = %+v, %v", f, err)
	}
	write(t, dir, ".devcontainer/devcontainer.json", `{"build": {"dockerfile": "Dockerfile"}}`)
	if f, err := Read(dir); !errors.Is(err, ErrNoImage) || err.Error() == ErrNoImage.Error() || f.Sum == "" {
		t.Errorf("build-only: %+v %v", f, err)
	}
	write(t, dir, ".devcontainer/devcontainer.json", `{"image": }`)
	if _, err := Read(dir); err == nil || errors.Is(err, ErrNoImage) {
		t.Errorf("broken JSON: %v", err)
	}
	os.RemoveAll(filepath.Join(dir, ".devcontainer"))
	if f, err := Read(dir); err != nil || f.Image != "root-level" {
		t.Errorf("root-level file: %+v, %v", f, err)
	}
}

// TestReadRefuses: what a command in the sandbox can put at the path is
// refused at once (the FIFO would block the test forever otherwise), with
// an error that names the file and what it is.
func TestReadRefuses(t *testing.T) {
	outside := t.TempDir()
	write(t, outside, "devcontainer.json", `{"image": "elsewhere"}`)
	cases := []struct {
		name string
		make func(ws string) error
		want string
	}{
		{"fifo", func(ws string) error {
			return syscall.Mkfifo(filepath.Join(ws, ".devcontainer/devcontainer.json"), 0o644)
		}, "is a named pipe"},
		{"symlink to /dev/zero", func(ws string) error {
			return os.Symlink("/dev/zero", filepath.Join(ws, ".devcontainer/devcontainer.json"))
		}, "is a symbolic link"},
		{"symlink to a good file", func(ws string) error {
			return os.Symlink(filepath.Join(outside, "devcontainer.json"), filepath.Join(ws, ".devcontainer/devcontainer.json"))
		}, "is a symbolic link"},
		{"symlinked directory", func(ws string) error {
			os.Remove(filepath.Join(ws, ".devcontainer"))
			return os.Symlink(outside, filepath.Join(ws, ".devcontainer"))
		}, "is a symbolic link"},
		{"directory", func(ws string) error { return os.Mkdir(filepath.Join(ws, ".devcontainer/devcontainer.json"), 0o755) }, "directory"},
		{"socket", func(ws string) error {
			l, err := net.Listen("unix", filepath.Join(ws, ".devcontainer/devcontainer.json"))
			if err == nil {
				t.Cleanup(func() { l.Close() })
			}
			return err
		}, "socket"},
		{"not a directory", func(ws string) error {
			os.Remove(filepath.Join(ws, ".devcontainer"))
			return os.WriteFile(filepath.Join(ws, ".devcontainer"), nil, 0o644)
		}, "not a directory"},
		{"2 MiB", func(ws string) error {
			return os.WriteFile(filepath.Join(ws, ".devcontainer/devcontainer.json"), []byte(`{"image": "x", "pad": "`+strings.Repeat("x", 2<<20)+`"}`), 0o644)
		}, "1 MiB"},
		{"fifo at the root", func(ws string) error {
			os.Remove(filepath.Join(ws, ".devcontainer"))
			return syscall.Mkfifo(filepath.Join(ws, ".devcontainer.json"), 0o644)
		}, "is a named pipe"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			os.Mkdir(filepath.Join(ws, ".devcontainer"), 0o755)
			if err := tc.make(ws); err != nil {
				t.Fatal(err)
			}
			f, err := Read(ws)
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ws) || f.Image != "" {
				t.Errorf("Read = %+v, %v; want a refusal saying %q", f, err, tc.want)
			}
		})
	}
	// Exactly 1 MiB is fine.
	ws := t.TempDir()
	body := `{"image": "x", "pad": "` + strings.Repeat("x", MaxSize-len(`{"image": "x", "pad": ""}`)) + `"}`
	write(t, ws, ".devcontainer/devcontainer.json", body)
	if f, err := Read(ws); err != nil || f.Image != "x" || len(body) != MaxSize {
		t.Errorf("a 1 MiB file: %v (%d bytes)", err, len(body))
	}
}

func TestImageReference(t *testing.T) {
	ws := t.TempDir()
	for _, bad := range []string{"x; rm -rf ~", "img\x1b[2J", "-flag", "a b", `q"uote`, ".hidden", "caf\u00e9", "x\n", "a" + strings.Repeat("b", 512)} {
		b, _ := json.Marshal(map[string]string{"image": bad})
		write(t, ws, ".devcontainer.json", string(b))
		if f, err := Read(ws); err == nil || errors.Is(err, ErrNoImage) {
			t.Errorf("image %q: %+v, %v", bad, f, err)
		}
	}
	for _, good := range []string{"mcr.microsoft.com/devcontainers/go:1-1.22-bookworm", "localhost:5000/a/b@sha256:" + strings.Repeat("a", 64), "UPPER:Tag_1", "a" + strings.Repeat("b", 511)} {
		b, _ := json.Marshal(map[string]string{"image": good})
		write(t, ws, ".devcontainer.json", string(b))
		if f, err := Read(ws); err != nil || f.Image != good {
			t.Errorf("image %q: %+v, %v", good, f, err)
		}
	}
}
