package review

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkDiffStat100k is `sandbash session diff --stat` over a workspace
// of 100,000 files of which 10 changed (8 modified, one added, one
// deleted), as overlayfs leaves them in the upper layer: the
// walk follows the layer, so the workspace's size does not count. `make
// bench` runs it. No mount is needed: the layer is written as overlayfs
// would write it (a whiteout is a 0/0 character device, which anyone may
// make).
func BenchmarkDiffStat100k(b *testing.B) {
	base := b.TempDir()
	host := filepath.Join(base, "host")
	for d := range 1000 {
		dir := filepath.Join(host, fmt.Sprintf("pkg%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.go", f)), []byte(fmt.Sprintf("package pkg%03d\n\n// file %d\nvar X%d = %d\n", d, f, f, f)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	l, err := Create(filepath.Join(base, "layer"), host, os.Getuid(), os.Getgid())
	if err != nil {
		b.Fatal(err)
	}
	up := l.Upper()
	write := func(rel, body string) {
		p := filepath.Join(up, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 8 {
		write(fmt.Sprintf("pkg%03d/f%02d.go", i*100, i), fmt.Sprintf("package pkg%03d\n\n// changed\nvar X%d = %d\n", i*100, i, i+1))
	}
	write("pkg500/new.go", "package pkg500\n")
	if err := os.MkdirAll(filepath.Join(up, "pkg950"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(up, "pkg950/f07.go"), unix.S_IFCHR, 0); err != nil {
		b.Fatal(err)
	}
	count := 0
	for b.Loop() {
		cs, err := l.Changes()
		if err != nil {
			b.Fatal(err)
		}
		if err := cs.WriteStat(io.Discard); err != nil {
			b.Fatal(err)
		}
		count = len(cs.List)
	}
	if count != 10 {
		b.Fatalf("%d changes", count)
	}
}
