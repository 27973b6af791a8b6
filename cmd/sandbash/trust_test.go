package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestTrustFlow(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	ws := t.TempDir()
	dc := filepath.Join(ws, ".devcontainer")
	os.Mkdir(dc, 0o755)
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dc, "devcontainer.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trust := func(args ...string) (string, int) {
		var out, errOut bytes.Buffer
		code := trustCmd(context.Background(), append([]string{"--workspace", ws}, args...), &out, &errOut)
		return out.String() + errOut.String(), code
	}
	if img, err := resolveImage("", "", ws, "auto"); err != nil || img != (imageChoice{}) {
		t.Errorf("no file: %+v, %v", img, err)
	}
	write(`{"image": "team/dev:1"}`)
	if _, err := resolveImage("", "", ws, "auto"); err == nil || !strings.Contains(err.Error(), "sandbash trust --workspace "+ws) {
		t.Errorf("never approved: %v", err)
	}
	if out, code := trust(); code != 0 || !strings.Contains(out, "team/dev:1") {
		t.Fatalf("trust: %d %s", code, out)
	}
	fi, err := os.Stat(filepath.Join(os.Getenv("XDG_STATE_HOME"), "sandbash", "trust"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("trust directory: %v, %v; want mode 0700", fi, err)
	}
	if img, err := resolveImage("", "", ws, "docker"); err != nil || img.Ref != "team/dev:1" || !img.Workspace {
		t.Errorf("approved: %+v, %v", img, err)
	}
	write(`{"image": "evil/dev:1"}`)
	if _, err := resolveImage("", "", ws, "auto"); err == nil || !strings.Contains(err.Error(), "changed since you approved it") || !strings.Contains(err.Error(), "evil/dev:1") {
		t.Errorf("changed: %v", err)
	}
	// Explicit choices bypass the file; bwrap does not read it at all.
	if img, err := resolveImage("mine:1", "", ws, "auto"); err != nil || img.Ref != "mine:1" || img.Workspace {
		t.Errorf("--image: %+v, %v", img, err)
	}
	if img, err := resolveImage("", "env:1", ws, "auto"); err != nil || img.Ref != "env:1" || img.Workspace {
		t.Errorf("SANDBASH_IMAGE: %+v, %v", img, err)
	}
	os.Remove(filepath.Join(dc, "devcontainer.json"))
	if err := syscall.Mkfifo(filepath.Join(dc, "devcontainer.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if img, err := resolveImage("", "", ws, "bwrap"); err != nil || img != (imageChoice{}) {
		t.Errorf("bwrap with a FIFO there: %+v, %v", img, err)
	}
	if out, code := trust(); code != exitFailed || !strings.Contains(out, "named pipe") {
		t.Errorf("trust of a FIFO: %d %s", code, out)
	}
	if out, code := trust("--revoke"); code != 0 || !strings.Contains(out, "revoked") {
		t.Errorf("revoke: %d %s", code, out)
	}
	if out, code := trust("--revoke"); code != 0 || !strings.Contains(out, "no approval") {
		t.Errorf("revoke again: %d %s", code, out)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/home/me/src/app": "/home/me/src/app",
		"/tmp/a b":         "'/tmp/a b'",
		"/tmp/it's":        `'/tmp/it'\''s'`,
		"/tmp/$(x)":        "'/tmp/$(x)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
