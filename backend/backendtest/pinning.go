package backendtest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// testPlantedSymlink: a call cannot choose what a later session mounts. A
// harness runs one-shot sessions with different flags on one workspace: a
// call of a run without --writable sub/out (where nothing pins sub) leaves
// a symlink at sub/out, and the next run with --writable sub/out must
// refuse the path, or at least not mount what the symlink leads to: here a
// --readable directory, which would become writable; as root with a
// root-owned workspace, ../../../etc would be the host's /etc, writable
// through the idmapped mount.
func testPlantedSymlink(f *fixture) {
	// The workspace belongs to whoever runs the suite: as root, the
	// idmapped case.
	ws := filepath.Join(f.base, "plantws")
	outside := filepath.Join(f.base, "outside")
	for _, d := range []string{ws, filepath.Join(ws, "sub", "out"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	if f.unstaged() != "" {
		// Nothing idmaps a root-owned workspace here (rootRefused checks
		// that it is refused): the user's workspace.
		chownTree(f, ws)
	}
	cfg := sandbash.Config{Workspace: ws, Readable: []string{outside}, Writable: []string{filepath.Join(ws, "sub", "out")}}

	// Relative, so that it leads to the same place on the host and in
	// the sandbox, where bwrap and runc resolve mount targets.
	s2 := f.plantThenReopen(ws, "sub/out", cfg)
	if s2 == nil {
		return
	}
	defer s2.Close()
	r := f.run(s2, "echo x > sub/out/planted && echo wrote")
	if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
		f.t.Errorf("a symlink a call planted in the workspace chose what the next session mounted: a --readable directory became writable (%q)", r.Output)
	}
}

// testPlantedCacheSymlink: the same for a cache's host directory named
// inside the workspace (--cache-dir .cache/x:/x, a CI habit): its layer is
// mounted idmapped, so a symlink planted there would show the next session
// any directory, root's private files included.
func testPlantedCacheSymlink(f *fixture) {
	if f.refused(f.caps.Refuses.Caches, sandbash.Config{Caches: []overlay.Cache{{Name: "planted", Host: f.dir("cache-refused"), Target: "/home/sandbash/plantedcache"}}}) {
		return
	}
	ws := filepath.Join(f.base, "plantws")
	outside := filepath.Join(f.base, "outside")
	for _, d := range []string{ws, filepath.Join(ws, "sub", "cache"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("not for the sandbox\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	cfg := sandbash.Config{Workspace: ws, Caches: []overlay.Cache{{Name: "planted", Host: filepath.Join(ws, "sub", "cache"), Target: "/home/sandbash/plantedcache"}}}
	s2 := f.plantThenReopen(ws, "sub/cache", cfg)
	if s2 == nil {
		return
	}
	defer s2.Close()
	if r := f.run(s2, "ls /home/sandbash/plantedcache; cat /home/sandbash/plantedcache/secret 2>&1; true"); strings.Contains(r.Output, "secret") {
		f.t.Errorf("a symlink a call planted in the workspace chose the next session's cache layer: %q", r.Output)
	}
}

// plantThenReopen has a call in a session on ws move ws/sub aside and
// plant link (under sub) as a symlink to ../../outside, then opens cfg. It
// returns nil when Open refused, as it must, naming the symlink; a session
// it returns is the caller's to check and close.
func (f *fixture) plantThenReopen(ws, link string, cfg sandbash.Config) *sandbash.Session {
	f.t.Helper()
	s := f.open(sandbash.Config{Workspace: ws})
	f.expect(s, "mv sub sub.old && mkdir sub && ln -s ../../outside "+link+" && echo planted", 0, "planted\n")
	if err := s.Close(); err != nil {
		f.t.Fatal(err)
	}
	cfg.Image = f.caps.Image
	s2, err := sandbash.Open(f.ctx, f.b, cfg)
	if err != nil {
		if !errors.Is(err, workspace.ErrBadPath) || !strings.Contains(err.Error(), "symlink") {
			f.t.Fatalf("reopening after a call planted a symlink: %v; want a refusal that names the symlink (workspace.ErrBadPath)", err)
		}
		return nil
	}
	return s2
}
