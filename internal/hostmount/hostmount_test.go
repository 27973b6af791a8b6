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

// TestUsernsPinned: the idmapping's user namespace a process made is
// pinned for the processes to come, which take it instead of making one;
// it maps as a fresh one would. A pin outside a root-only directory, or
// one that is not a user namespace, is never taken.
func TestUsernsPinned(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making the idmapping's user namespace needs root")
	}
	m := IDMap{UID: 54321, GID: 54320} // this test's own: no run shares it
	name := filepath.Join(pinDir, pinName(m))
	unpin := func() {
		for unix.Unmount(name, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW) == nil {
		}
		_ = os.Remove(name)
	}
	unpin()
	t.Cleanup(unpin)
	ino := func(fd int) uint64 {
		t.Helper()
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	fd, err := userns(m)
	if err != nil {
		t.Fatal(err)
	}
	made := ino(fd)
	pinned, ok := openPinned(name)
	if !ok {
		t.Fatalf("%s is not pinned after a process made it", name)
	}
	if got := ino(pinned); got != made {
		t.Errorf("pinned namespace %d; want the one made, %d", got, made)
	}
	if fd, err = userns(m); err != nil {
		t.Fatal(err)
	} else if got := ino(fd); got != made {
		t.Errorf("the next userns made another namespace (%d), not the pinned one (%d)", got, made)
	}

	// The pinned namespace maps as a fresh one: root's files show as
	// m.UID:m.GID through a mount idmapped with it.
	namespaces.mu.Lock()
	delete(namespaces.m, m) // this process's own, so that New takes the pin
	namespaces.mu.Unlock()
	s := stage(t, &m)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	staged, err := s.Add(dir, true, true)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(staged, "f"), &st); err != nil || st.Uid != uint32(m.UID) || st.Gid != uint32(m.GID) {
		t.Errorf("a root-owned file through the pinned mapping: %d:%d, %v; want %d:%d", st.Uid, st.Gid, err, m.UID, m.GID)
	}

	// A pin directory others can reach is not trusted, nor is a file that
	// is no user namespace.
	if err := os.Chmod(pinDir, 0o755); err != nil {
		t.Fatal(err)
	}
	_, ok = openPinned(name)
	if err := os.Chmod(pinDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Errorf("took a namespace pinned in a directory every user can reach")
	}
	unpin()
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if fd, ok := openPinned(name); ok {
		unix.Close(fd)
		t.Errorf("took a plain file for a pinned namespace")
	}
	if fd, err := userns(m); err != nil {
		t.Fatal(err)
	} else {
		unix.Close(fd)
	}
	if fd, ok := openPinned(name); !ok {
		t.Errorf("a plain file left where a pin goes was not pinned over")
	} else {
		unix.Close(fd)
	}
}
