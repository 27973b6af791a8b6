package rmtree

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveAll: the whole tree goes, at every depth; what symbolic links
// in it lead to stays.
func TestRemoveAll(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	dir := filepath.Join(base, "dir")
	for _, d := range []string{outside + "/keep", dir + "/tmp/a/b/c", dir + "/home/.cache/x", dir + "/output"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{outside + "/keep/file", dir + "/.owner", dir + "/tmp/a/b/c/f", dir + "/home/f", dir + "/output/spill"} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{dir + "/linked": outside, dir + "/tmp/linked": outside, dir + "/home/.cache/x/linked": outside + "/keep"} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	if _, err := os.Stat(outside + "/keep/file"); err != nil {
		t.Errorf("a file a symbolic link led to went too: %v", err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Errorf("a directory that is gone: %v", err)
	}
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAll(dir); err != nil {
		t.Errorf("a file: %v", err)
	}
}
