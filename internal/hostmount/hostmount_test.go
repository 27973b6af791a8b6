package hostmount

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// stage opens a stage for a test, as root, and closes it when the test
// ends.
func stage(t *testing.T, idmap *IDMap) *Stage {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("staging mounts needs root")
	}
	id := "test-" + strings.ReplaceAll(t.Name(), "/", "-")
	s, err := New(id, 0, nil, idmap)
	if err != nil {
		t.Fatal(err)
	}
	dir := s.Dir()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the staging directory is still there after Close: %v", err)
			for _, m := range mountsBelow(dir) {
				_ = unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			}
			_ = os.RemoveAll(dir)
		}
	})
	return s
}

// TestAddRefusesSymlinks: a path checked symlink-free that has since been
// given a symlink on the way (a command swapped a directory) is refused,
// not followed.
func TestAddRefusesSymlinks(t *testing.T) {
	s := stage(t, nil)
	base := t.TempDir()
	real := filepath.Join(base, "real", "sub")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(base, "link"), filepath.Join(base, "link", "sub")} {
		if got, err := s.Add(p, true, false); err == nil {
			t.Errorf("Add(%s) staged %s; want a refusal of the symlink", p, got)
		}
	}
	got, err := s.Add(real, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(got); err != nil {
		t.Error(err)
	}
}

// TestCloseUnmountsOnlyItsOwn: Close detaches what is mounted in the
// staging directory, never what a path there leads to. A staged mount whose
// root is a symlink (what cloning a path swapped for one gives) must not
// make Close follow it and detach a mount elsewhere on the host.
func TestCloseUnmountsOnlyItsOwn(t *testing.T) {
	s := stage(t, nil)
	base := t.TempDir()
	decoy := filepath.Join(base, "decoy")
	if err := os.Mkdir(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", decoy, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(decoy, unix.MNT_DETACH) })
	link := filepath.Join(base, "link")
	if err := os.Symlink(decoy, link); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, link, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(s.Dir(), "m9")
	if err := os.WriteFile(dst, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err = unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if !mounted(decoy) {
		t.Errorf("Close detached %s, a mount outside its staging directory that a staged symlink led to", decoy)
	}
	if mounted(dst) {
		t.Errorf("Close left %s mounted", dst)
	}
}

// TestCloseDetachesStacked: something mounted over a staged mount, or
// elsewhere in the staging directory, is detached too, and what was
// staged keeps its content: Close does not stop at the mounts it made.
func TestCloseDetachesStacked(t *testing.T) {
	s := stage(t, nil)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	staged, err := s.Add(src, false, false)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(s.Dir(), "other")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{staged, other} {
		if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	for _, p := range []string{staged, other} {
		if mounted(p) {
			t.Errorf("Close left %s mounted", p)
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	}
	if b, err := os.ReadFile(filepath.Join(src, "keep")); err != nil || string(b) != "keep" {
		t.Errorf("the staged directory's file after Close: %q, %v", b, err)
	}
}

// mounted reports whether p is a mount point in this mount namespace.
func mounted(p string) bool {
	for _, m := range mountsBelow(filepath.Dir(p)) {
		if m == p {
			return true
		}
	}
	return false
}

// TestCloseKeepsWhatItStaged: Close removes the staged mounts, never what
// they show: the directories and files staged, and what is mounted below
// them, keep their content.
func TestCloseKeepsWhatItStaged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("staging mounts needs root")
	}
	s, err := New("test-"+t.Name(), 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	ws, sub := filepath.Join(base, "ws"), filepath.Join(base, "ws", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(sub, unix.MNT_DETACH)
	file := filepath.Join(base, "file")
	keep := []string{filepath.Join(ws, "a"), filepath.Join(sub, "b"), file}
	for _, f := range keep {
		if err := os.WriteFile(f, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{ws, file} {
		for _, ro := range []bool{true, false} {
			if _, err := s.Add(p, ro, false); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the staging directory is still there after Close: %v", err)
	}
	for _, f := range keep {
		if b, err := os.ReadFile(f); err != nil || string(b) != "keep" {
			t.Errorf("%s after Close: %q, %v", f, b, err)
		}
	}
}

// TestUsernsMadeOnce: the idmapping's user namespace is made once per
// process and mapping; every Stage gets a descriptor of its own.
func TestUsernsMadeOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making the idmapping's user namespace needs root")
	}
	ino := func(m IDMap) uint64 {
		t.Helper()
		fd, err := sharedUserns(m)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	a := IDMap{UID: 65533, GID: 65533}
	Prepare(a)
	first := ino(a)
	if again := ino(a); again != first {
		t.Errorf("the same mapping got another user namespace: %d, then %d", first, again)
	}
	if other := ino(IDMap{UID: 65533}); other == first {
		t.Errorf("another mapping got the same user namespace %d", other)
	}
	s := stage(t, &a)
	if s.userns < 0 {
		t.Fatal("a stage that maps ids has no user namespace")
	}
	var st unix.Stat_t
	if err := unix.Fstat(s.userns, &st); err != nil || st.Ino != first {
		t.Errorf("the stage's user namespace: %d, %v; want %d", st.Ino, err, first)
	}
}
