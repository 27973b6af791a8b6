package sysbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFindIgnoresPATH: a program of the same name in a directory PATH
// names first (a workspace's .venv/bin, say) is never the one found.
func TestFindIgnoresPATH(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"sh", "sysbin-no-such-program"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	p, err := Find("sh")
	if err != nil || strings.HasPrefix(p, dir) || !strings.HasPrefix(p, "/") {
		t.Errorf("Find(sh) = %q, %v; want the system's sh, not %s's", p, err, dir)
	}
	if p, err := Find("sysbin-no-such-program"); err == nil || !strings.Contains(err.Error(), "never from $PATH") {
		t.Errorf("a program only on PATH: %q, %v; want an error that says where sandbash looks", p, err)
	}
}
