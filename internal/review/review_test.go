package review

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// These tests make real overlay mounts with the options the backends use,
// run commands in them as the workspace's owner would, and look at what
// the layers say: they need root.

const owner = 4242

type fixture struct {
	t      *testing.T
	base   string
	host   string
	l      *Layer
	merged string
	up     bool
}

func newFixture(t *testing.T, files map[string]string, setup ...func(host string)) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts overlays")
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f := &fixture{t: t, base: base, host: filepath.Join(base, "host"), merged: filepath.Join(base, "merged")}
	for _, d := range []string{f.host, f.merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeTree(t, f.host, files)
	chownTree(t, f.host, owner)
	for _, fn := range setup {
		fn(f.host)
	}
	l, err := Create(filepath.Join(base, "layer"), f.host, owner, owner)
	if err != nil {
		t.Fatal(err)
	}
	f.l = l
	t.Cleanup(f.umount)
	return f
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func chownTree(t *testing.T, root string, id int) {
	t.Helper()
	err := filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id, id)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) mount() {
	f.t.Helper()
	opts := "lowerdir=" + strings.Join(f.l.LowerDirs(f.host), ":") + ",upperdir=" + f.l.Upper() + ",workdir=" + f.l.Work() + "," + MountOptions
	if err := unix.Mount("overlay", f.merged, "overlay", 0, opts); err != nil {
		f.t.Fatalf("mount %s: %v", opts, err)
	}
	f.up = true
}

func (f *fixture) umount() {
	if f.up {
		if err := unix.Unmount(f.merged, 0); err != nil {
			f.t.Errorf("umount: %v", err)
		}
		f.up = false
	}
}

// sh runs script in the merged view as the workspace's owner, the way a
// call would: mounted, then unmounted.
func (f *fixture) sh(script string) {
	f.t.Helper()
	f.mount()
	defer f.umount()
	cmd := exec.Command("bash", "-ec", script)
	cmd.Dir = f.merged
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: owner, Gid: owner}}
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

func (f *fixture) changes(paths ...string) *Changes {
	f.t.Helper()
	cs, err := f.l.Changes(paths...)
	if err != nil {
		f.t.Fatal(err)
	}
	return cs
}

func kinds(cs *Changes) string {
	var out []string
	for _, c := range cs.List {
		s := string(c.Kind) + " " + c.Path
		if c.From != "" {
			s += " <- " + c.From
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

func patch(t *testing.T, cs *Changes) string {
	t.Helper()
	var b bytes.Buffer
	if err := cs.WritePatch(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hashTree lists a tree: names, types, modes, owners, contents.
func hashTree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := strings.TrimPrefix(p, root) + " " + fi.Mode().String() + " " + string(rune('0'+st.Uid%10))
		switch {
		case fi.Mode().IsRegular():
			line += " " + read(t, p)
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

func TestChangesOfEveryKind(t *testing.T) {
	f := newFixture(t, map[string]string{
		"a.txt": "one\ntwo\nthree\n", "b.sh": "echo b\n", "old.txt": "old\n", "mv.txt": "moving file\n",
		"sub/c.txt": "c\n", "sub/d.txt": "d\n", "keep/k.txt": "k\n", "link": "", "bin.dat": "x",
	})
	before := hashTree(t, f.host)
	f.sh(`printf 'one\n2\nthree\n' > a.txt; echo new > new.txt; rm old.txt; mv mv.txt moved.txt
chmod 755 b.sh; rm link; ln -s a.txt link; printf 'bin\0ary' > bin.dat
rm -rf sub; mkdir sub; echo n > sub/n.txt; mkdir emptydir; mkfifo fifo`)
	if after := hashTree(t, f.host); after != before {
		t.Fatalf("the host changed before apply:\n%s\n---\n%s", before, after)
	}
	cs := f.changes()
	want := "M a.txt\nM b.sh\nM bin.dat\nA emptydir\nA fifo\nT link\nR moved.txt <- mv.txt\nA new.txt\nD old.txt\nD sub/c.txt\nD sub/d.txt\nA sub/n.txt"
	if got := kinds(cs); got != want {
		t.Fatalf("changes:\n%s\nwant\n%s", got, want)
	}
	p := patch(t, cs)
	for _, s := range []string{"bin.dat: binary", "fifo: FIFO; NOT APPLIED", "+2\n", "rename from mv.txt", "old mode 100644\nnew mode 100755", "deleted file mode 100644", "new file mode 120000", "emptydir: new directory"} {
		if !strings.Contains(p, s) {
			t.Errorf("the patch lacks %q:\n%s", s, p)
		}
	}
	// git reads it, and applied by git it gives the session's text files.
	gitApply(t, f.host, p)
}

// gitApply checks the patch with `git apply --check` and applies it to a
// copy of the host.
func gitApply(t *testing.T, host, p string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", host, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	for _, args := range [][]string{{"apply", "--check", "-"}, {"apply", "-"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = cp
		cmd.Stdin = strings.NewReader(p)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s\npatch:\n%s", args, err, out, p)
		}
	}
	return cp
}

func TestApplyConflictAndOwnership(t *testing.T) {
	f := newFixture(t, map[string]string{"mine.txt": "mine\n", "theirs.txt": "theirs\n", "gone.txt": "gone\n"}, func(host string) {
		// A file of another user's that the owner may write.
		if err := os.Chown(filepath.Join(host, "mine.txt"), 777, 777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(host, "mine.txt"), 0o666); err != nil {
			t.Fatal(err)
		}
	})
	f.sh(`echo changed > mine.txt; echo session > theirs.txt; rm gone.txt; mkdir -p d/e; echo new > d/e/new.txt`)
	// Someone edits theirs.txt on the host meanwhile.
	if err := os.WriteFile(filepath.Join(f.host, "theirs.txt"), []byte("edited on the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := f.changes()
	if c := find(cs, "theirs.txt"); c == nil || c.Conflict == "" {
		t.Fatalf("no conflict on theirs.txt: %+v", c)
	}
	res, err := f.l.Apply()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) != 1 || res.Refused[0].Path != "theirs.txt" {
		t.Fatalf("refused: %+v", res.Refused)
	}
	if got := read(t, filepath.Join(f.host, "theirs.txt")); got != "edited on the host\n" {
		t.Errorf("the host's edit was overwritten: %q", got)
	}
	if got := read(t, filepath.Join(f.host, "mine.txt")); got != "changed\n" {
		t.Errorf("mine.txt: %q", got)
	}
	if _, err := os.Stat(filepath.Join(f.host, "gone.txt")); !os.IsNotExist(err) {
		t.Errorf("gone.txt is still there: %v", err)
	}
	for p, uid := range map[string]uint32{"mine.txt": 777, "d": owner, "d/e": owner, "d/e/new.txt": owner} {
		fi, err := os.Lstat(filepath.Join(f.host, p))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != uid {
			t.Errorf("%s is owned by %d:%d, want %d", p, st.Uid, st.Gid, uid)
		}
	}
	if got := kinds(f.changes()); got != "M theirs.txt" {
		t.Errorf("after apply the diff still shows:\n%s", got)
	}
	// What was applied is the host's again in the view: a later change
	// there is not a conflict.
	f.sh(`test "$(cat mine.txt)" = changed; echo again > mine.txt`)
	if c := find(f.changes(), "mine.txt"); c == nil || c.Conflict != "" {
		t.Errorf("mine.txt after a second change: %+v", c)
	}
}

func find(cs *Changes, p string) *Change {
	for i := range cs.List {
		if cs.List[i].Path == p {
			return &cs.List[i]
		}
	}
	return nil
}

// A symlink the session planted never leads apply out of the workspace:
// not one in its layer over a directory a lower layer filled, and not one
// that replaces a directory on the host meanwhile.
func TestApplyFollowsNoSymlink(t *testing.T) {
	outside := t.TempDir()
	f := newFixture(t, map[string]string{"d/keep.txt": "keep\n"})
	f.sh(`mkdir etc; echo planted > etc/passwd; echo x > d/new.txt`)
	if err := f.l.Checkpoint("one"); err != nil {
		t.Fatal(err)
	}
	f.sh(`rm -rf etc; ln -s ` + outside + ` etc`)
	// The host's d becomes a symlink to outside, as if raced.
	if err := os.Rename(filepath.Join(f.host, "d"), filepath.Join(f.base, "d-moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.host, "d")); err != nil {
		t.Fatal(err)
	}
	res, err := f.l.Apply()
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) > 0 {
		t.Fatalf("apply wrote outside the workspace: %v (result %+v)", entries, res)
	}
	if l, err := os.Readlink(filepath.Join(f.host, "etc")); err != nil || l != outside {
		t.Errorf("the session's symlink was not applied as a symlink: %q %v", l, err)
	}
	var refused []string
	for _, r := range res.Refused {
		refused = append(refused, r.Path)
	}
	if strings.Join(refused, ",") != "d,d/new.txt" {
		t.Errorf("refused %v, want d and d/new.txt (the host's d is a symlink now)", res.Refused)
	}
}

func TestWhiteoutsAreDeletions(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a\n", "dir/x": "x\n", "dir/y": "y\n", "opq/z": "z\n"})
	f.sh(`rm a; rm -rf dir; rm -rf opq; mkdir opq; echo n > opq/n`)
	if got, want := kinds(f.changes()), "D a\nD dir\nD dir/x\nD dir/y\nA opq/n\nD opq/z"; got != want {
		t.Fatalf("changes:\n%s\nwant\n%s", got, want)
	}
	if _, err := f.l.Apply(); err != nil {
		t.Fatal(err)
	}
	err := filepath.Walk(f.host, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&(os.ModeDevice|os.ModeCharDevice) != 0 {
			t.Errorf("a device file reached the host: %s", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := hashTree(t, f.host); got != " drwxr-xr-x 2\n/opq drwxr-xr-x 2\n/opq/n -rw-r--r-- 2 n\n" {
		t.Errorf("host after apply:\n%s", got)
	}
	if got := kinds(f.changes()); got != "" {
		t.Errorf("still changed:\n%s", got)
	}
}

func TestGitMetadataNeverApplied(t *testing.T) {
	f := newFixture(t, map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", ".git/objects/.keep": "", "sub/.git": "gitdir: ../.git/modules/sub\n"})
	f.sh(`mkdir -p .git/hooks; printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit
printf '[core]\n\tfsmonitor = evil\n' > .git/config; mkdir -p .git/objects/ab; echo obj > .git/objects/ab/cd; echo 'ref: refs/heads/x' > .git/HEAD
echo 'gitdir: /tmp/evil' > sub/.git; mkdir -p nested/objects; echo 'ref: x' > nested/HEAD; echo '[core]' > nested/config`)
	res, err := f.l.Apply()
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, r := range res.Refused {
		refused = append(refused, r.Path)
	}
	if got, want := strings.Join(refused, " "), ".git/config .git/hooks/pre-commit nested/config sub/.git"; got != want {
		t.Errorf("refused %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(f.host, ".git/hooks/pre-commit")); err == nil {
		t.Error("a hook reached the host")
	}
	if got := read(t, filepath.Join(f.host, ".git/config")); got != "[core]\n" {
		t.Errorf(".git/config on the host: %q", got)
	}
	if got := read(t, filepath.Join(f.host, ".git/objects/ab/cd")); got != "obj\n" {
		t.Errorf("objects were not applied: %q", got)
	}
	if p := patch(t, f.changes()); strings.Contains(p, "pwned") || strings.Contains(p, "fsmonitor") {
		t.Errorf("the patch carries what apply refuses:\n%s", p)
	}
}

func TestCheckpointRestoreReset(t *testing.T) {
	f := newFixture(t, map[string]string{"f": "host\n", "g": "g\n"})
	f.sh(`echo one > f`)
	if err := f.l.Checkpoint("one"); err != nil {
		t.Fatal(err)
	}
	f.sh(`echo two > f; rm g`)
	if err := f.l.Checkpoint("two"); err != nil {
		t.Fatal(err)
	}
	f.sh(`echo three > f; echo new > n`)
	if err := f.l.Restore("one"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat f)" = one; test -e g; test ! -e n`)
	if err := f.l.Restore("two"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat f)" = two; test ! -e g`)
	// More checkpoints than a mount stacks are squashed.
	for i := range MaxStack + 2 {
		f.sh(`echo ` + string(rune('a'+i)) + ` > f`)
		if err := f.l.Checkpoint("c" + string(rune('a'+i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(f.l.Stack()); n > MaxStack {
		t.Errorf("%d layers stacked", n)
	}
	f.sh(`test "$(cat f)" = ` + string(rune('a'+MaxStack+1)) + `; test ! -e g`)
	if err := f.l.Restore("cb"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat f)" = b`)
	// Reset one path: the host's g is back; f stays the session's.
	if _, err := f.l.Reset("g"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat g)" = g; test "$(cat f)" = b`)
	if err := f.l.Restore("two"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat f)" = two; test ! -e g`)
	if _, err := f.l.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := kinds(f.changes()); got != "" {
		t.Errorf("after reset: %s", got)
	}
	if err := f.l.Restore("nope"); err == nil {
		t.Error("restored a checkpoint that does not exist")
	}
}

// Resetting a path inside a directory the session replaced whole gives
// back the host's file, and keeps the rest replaced.
func TestResetInsideOpaqueDirectory(t *testing.T) {
	f := newFixture(t, map[string]string{"d/a": "a\n", "d/b": "b\n"})
	f.sh(`rm -rf d; mkdir d; echo c > d/c`)
	if _, err := f.l.Reset("d/a"); err != nil {
		t.Fatal(err)
	}
	f.sh(`test "$(cat d/a)" = a; test ! -e d/b; test "$(cat d/c)" = c`)
	if got, want := kinds(f.changes()), "D d/b\nA d/c"; got != want {
		t.Errorf("changes:\n%s\nwant\n%s", got, want)
	}
}
