package sandbash

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sandbash/sandbash/internal/owner"
)

// TestSweepDirsStaysInParent: gc sweeps the temporary directory, and
// $TMPDIR may be a directory another user can write (sudo -E, su without
// -, pam_tmpdir's /tmp/user/UID). That user can replace the parent with a
// symlink between the check of a directory's mark and its removal; the
// removal must still be of the directory that was checked, never of the
// same name where the symlink leads (here a live session's directory).
// collect runs between the two, so it plays the attacker winning the race.
func TestSweepDirsStaysInParent(t *testing.T) {
	base := t.TempDir()
	parent := filepath.Join(base, "tmp")
	victim := filepath.Join(base, "elsewhere")
	name := "sandbash-abc-123"
	for _, d := range []string{filepath.Join(parent, name), filepath.Join(victim, name)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := owner.Mark(filepath.Join(parent, name)); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(victim, name, "precious")
	if err := os.WriteFile(precious, []byte("a live session's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	swapped := false
	collect := func(string) bool {
		if err := os.Rename(parent, parent+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, parent); err != nil {
			t.Fatal(err)
		}
		swapped = true
		return true
	}
	removed, err := sweepDirs(parent, collect)
	if !swapped {
		t.Fatalf("the sweep never checked %s", filepath.Join(parent, name))
	}
	if _, serr := os.Stat(precious); serr != nil {
		t.Errorf("the sweep followed the swapped parent and removed %s: %v (removed %v, %v)", filepath.Join(victim, name), serr, removed, err)
	}
	if _, serr := os.Stat(filepath.Join(parent+".old", name)); serr == nil {
		t.Errorf("the directory whose mark was checked (now %s) is still there (removed %v, %v)", filepath.Join(parent+".old", name), removed, err)
	}
}
