package devcontainer

import (
	"errors"
	"os"
	"path/filepath"
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

func TestImage(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Image(dir); !errors.Is(err, ErrNoImage) {
		t.Errorf("no file: %v", err)
	}
	write(t, dir, ".devcontainer.json", `{"image": "root-level"}`)
	write(t, dir, ".devcontainer/devcontainer.json", `{
		// the team's image
		"name": "dev",
		"image": "mcr.example/dev:1", /* pinned */
		"features": {},
	}`)
	img, file, err := Image(dir)
	if err != nil || img != "mcr.example/dev:1" || filepath.Base(filepath.Dir(file)) != ".devcontainer" {
		t.Errorf("Image = %q, %q, %v", img, file, err)
	}
	write(t, dir, ".devcontainer/devcontainer.json", `{"build": {"dockerfile": "Dockerfile"}}`)
	if _, _, err := Image(dir); !errors.Is(err, ErrNoImage) || err.Error() == ErrNoImage.Error() {
		t.Errorf("build-only: %v", err)
	}
	write(t, dir, ".devcontainer/devcontainer.json", `{"image": }`)
	if _, _, err := Image(dir); err == nil || errors.Is(err, ErrNoImage) {
		t.Errorf("broken JSON: %v", err)
	}
}
