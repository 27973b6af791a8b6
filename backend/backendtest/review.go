package backendtest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
)

// The workspace in overlay mode: calls write the session's own layer, the
// host workspace stays as it was until the changes are applied.

// untouched fingerprints a host tree as closely as a test can: every
// entry's type, mode, owner, size, mtime and ctime (which any write,
// chmod or chown moves), content and symlink target.
func untouched(f *fixture, root string) string {
	f.t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d %d %d %d", strings.TrimPrefix(p, root), fi.Mode(), st.Uid, st.Gid, st.Size, st.Mtim.Nano(), st.Ctim.Nano())
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		case fi.Mode()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			line += " -> " + t
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func (f *fixture) openOverlay(ws string) *sandbash.Session {
	return f.open(sandbash.Config{Workspace: ws, WorkspaceMode: sandbash.WorkspaceOverlay})
}

func changeList(f *fixture, s *sandbash.Session, paths ...string) (*sandbash.Changes, string) {
	f.t.Helper()
	cs, err := s.Diff(f.ctx, paths...)
	if err != nil {
		f.t.Fatalf("Diff: %v", err)
	}
	var out []string
	for _, c := range cs.List {
		l := string(c.Kind) + " " + c.Path
		if c.From != "" {
			l += " <- " + c.From
		}
		out = append(out, l)
	}
	return cs, strings.Join(out, "\n")
}

// testReviewApply: every kind of change a call makes stays off the host,
// shows in the diff (which git applies), and Apply writes it, owned by the
// workspace's owner, except a file someone edited on the host meanwhile.
func testReviewApply(f *fixture) {
	if f.refused(f.caps.Refuses.Overlay, sandbash.Config{WorkspaceMode: sandbash.WorkspaceOverlay}) {
		return
	}
	ws, outside := f.dir("ws"), f.dir("outside")
	writeFiles(f, ws, map[string]string{
		"edit.txt": "one\ntwo\nthree\n", "gone.txt": "gone\n", "mv.txt": "moved content\n", "run.sh": "echo hi\n",
		"conflict.txt": "base\n", "dir/a": "a\n", "dir/b": "b\n", "keep.txt": "keep\n",
	})
	before := untouched(f, ws)
	s := f.openOverlay(ws)
	// The layers: root's (or this user's), entered by the calls' group.
	if fi, err := os.Stat(filepath.Join(s.Dir(), "review")); err != nil {
		f.t.Error(err)
	} else if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o067 != 0 {
		f.t.Errorf("the session's layers are %v, owned by %d:%d: others could read the session's changes, or the workspace's owner change them", fi.Mode(), st.Uid, st.Gid)
	}
	f.expect(s, `printf 'one\n2\nthree\n' > edit.txt && echo new > new.txt && rm gone.txt && mv mv.txt renamed.txt &&
chmod 755 run.sh && ln -s edit.txt sym && echo mine > conflict.txt && rm -rf dir && mkdir dir && echo c > dir/c &&
ln -s `+outside+` escape && echo done`, 0, "done\n")
	// The calls see their own writes, deletions and renames at once.
	f.expect(s, `cat edit.txt new.txt renamed.txt dir/c; test -e gone.txt || echo no-gone; test -e dir/a || echo no-a; test -x run.sh && echo exec; readlink sym`,
		0, "one\n2\nthree\nnew\nmoved content\nc\nno-gone\nno-a\nexec\nedit.txt\n")
	if after := untouched(f, ws); after != before {
		f.t.Fatalf("the host workspace changed before apply:\nbefore\n%s\nafter\n%s", before, after)
	}
	cs, got := changeList(f, s)
	want := "M conflict.txt\nD dir/a\nD dir/b\nA dir/c\nM edit.txt\nA escape\nD gone.txt\nA new.txt\nR renamed.txt <- mv.txt\nM run.sh\nA sym"
	if got != want {
		f.t.Errorf("diff:\n%s\nwant\n%s", got, want)
	}
	var patch bytes.Buffer
	if err := cs.WritePatch(&patch); err != nil {
		f.t.Fatal(err)
	}
	gitApplies(f, ws, patch.String())

	// Someone edits conflict.txt on the host meanwhile.
	if err := os.WriteFile(filepath.Join(ws, "conflict.txt"), []byte("host edit\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	res, err := s.Apply(f.ctx)
	if err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
	if len(res.Refused) != 1 || res.Refused[0].Path != "conflict.txt" || !strings.Contains(res.Refused[0].Reason, "changed on the host") {
		f.t.Errorf("refused: %+v; want conflict.txt alone, as changed on the host", res.Refused)
	}
	for p, want := range map[string]string{"edit.txt": "one\n2\nthree\n", "new.txt": "new\n", "renamed.txt": "moved content\n", "dir/c": "c\n", "conflict.txt": "host edit\n", "keep.txt": "keep\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, p)); err != nil || string(b) != want {
			f.t.Errorf("%s on the host after apply: %q %v; want %q", p, b, err, want)
		}
	}
	for _, p := range []string{"gone.txt", "mv.txt", "dir/a", "dir/b"} {
		if _, err := os.Lstat(filepath.Join(ws, p)); !errors.Is(err, fs.ErrNotExist) {
			f.t.Errorf("%s is still on the host after apply: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(ws, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		f.t.Errorf("run.sh's mode on the host: %v %v", fi, err)
	}
	for p, want := range map[string]string{"sym": "edit.txt", "escape": outside} {
		if t, err := os.Readlink(filepath.Join(ws, p)); err != nil || t != want {
			f.t.Errorf("%s on the host: %q %v; want a symlink to %s", p, t, err, want)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		f.t.Errorf("apply wrote through the session's symlink: %v", entries)
	}
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		st := fi.Sys().(*syscall.Stat_t)
		switch {
		case d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0:
			f.t.Errorf("apply left a special file (a whiteout?) on the host: %s %v", p, d.Type())
		case int(st.Uid) != f.uid || int(st.Gid) != f.gid:
			f.t.Errorf("%s is owned by %d:%d after apply, want the workspace owner %d:%d", p, st.Uid, st.Gid, f.uid, f.gid)
		case strings.HasPrefix(d.Name(), ".sandbash-apply-"):
			f.t.Errorf("apply left a temporary file: %s", p)
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, got := changeList(f, s); got != "M conflict.txt" {
		f.t.Errorf("after apply the diff shows:\n%s\nwant only the refused conflict.txt", got)
	}
	// The session goes on; reset takes the refused change back.
	f.expect(s, "cat new.txt conflict.txt", 0, "new\nmine\n")
	if _, err := s.Reset(f.ctx, "conflict.txt"); err != nil {
		f.t.Fatalf("Reset: %v", err)
	}
	f.expect(s, "cat conflict.txt", 0, "host edit\n")
	if _, got := changeList(f, s); got != "" {
		f.t.Errorf("after reset the diff shows:\n%s", got)
	}
}

// gitApplies checks, when the host has git, that git accepts the patch
// for a copy of the workspace.
func gitApplies(f *fixture, ws, patch string) {
	f.t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		f.t.Log("no git on the host: the patch is not checked with git apply")
		return
	}
	cp := filepath.Join(f.base, "patched")
	if out, err := exec.Command("cp", "-a", ws, cp).CombinedOutput(); err != nil {
		f.t.Fatalf("cp: %v %s", err, out)
	}
	cmd := exec.Command("git", "apply", "--check", "-")
	cmd.Dir = cp
	cmd.Stdin = strings.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		f.t.Errorf("git apply --check refuses the diff: %v\n%s\n%s", err, out, patch)
	}
}

// testReviewCheckpoints: checkpoints and restores bring the calls' view
// back; a change to the layers waits for no call (it is refused while
// one runs); the session's layer has one live mount however calls
// overlap; the host never changes.
func testReviewCheckpoints(f *fixture) {
	if f.refused(f.caps.Refuses.Overlay, sandbash.Config{WorkspaceMode: sandbash.WorkspaceOverlay}) {
		return
	}
	ws := f.dir("ws")
	writeFiles(f, ws, map[string]string{"f.txt": "v0\n", "gone.txt": "here\n"})
	before := untouched(f, ws)
	// A readable path above the workspace: the overlay goes on top of it.
	s := f.open(sandbash.Config{Workspace: ws, Readable: []string{filepath.Dir(ws)}, WorkspaceMode: sandbash.WorkspaceOverlay})
	f.expect(s, "echo v1 > f.txt", 0, "")
	if err := s.Checkpoint(f.ctx, "one"); err != nil {
		f.t.Fatalf("Checkpoint: %v", err)
	}
	f.expect(s, "echo v2 > f.txt && rm gone.txt && echo n > new.txt", 0, "")
	if err := s.Checkpoint(f.ctx, "two"); err != nil {
		f.t.Fatalf("Checkpoint: %v", err)
	}
	f.expect(s, "echo v3 > f.txt", 0, "")
	stop := f.startLong(s, "echo started; sleep 600")
	f.expect(s, "cat f.txt", 0, "v3\n")
	if devs := liveMounts(s.ID()); len(devs) != 1 {
		f.t.Errorf("the session's workspace layer has %d live mounts with two calls running, want 1: %v", len(devs), devs)
	}
	if err := s.Checkpoint(f.ctx, "busy"); !errors.Is(err, sandbash.ErrBusy) {
		f.t.Errorf("Checkpoint while a call runs: %v, want ErrBusy", err)
	}
	if _, err := s.Diff(f.ctx); !errors.Is(err, sandbash.ErrBusy) {
		f.t.Errorf("Diff while a call runs: %v, want ErrBusy", err)
	}
	stop()
	if err := s.Restore(f.ctx, "one"); err != nil {
		f.t.Fatalf("Restore: %v", err)
	}
	f.expect(s, "cat f.txt gone.txt; test -e new.txt || echo no-new", 0, "v1\nhere\nno-new\n")
	if err := s.Restore(f.ctx, "two"); err != nil {
		f.t.Fatalf("Restore: %v", err)
	}
	f.expect(s, "cat f.txt new.txt; test -e gone.txt || echo no-gone", 0, "v2\nn\nno-gone\n")
	if devs := liveMounts(s.ID()); len(devs) > 1 {
		f.t.Errorf("after restores the layer has %d live mounts: %v", len(devs), devs)
	}
	if err := s.Restore(f.ctx, "never-made"); !errors.Is(err, sandbash.ErrNoCheckpoint) {
		f.t.Errorf("Restore of an unknown checkpoint: %v", err)
	}
	if _, err := s.Reset(f.ctx); err != nil {
		f.t.Fatalf("Reset: %v", err)
	}
	f.expect(s, "cat f.txt gone.txt; test -e new.txt || echo no-new", 0, "v0\nhere\nno-new\n")
	if after := untouched(f, ws); after != before {
		f.t.Errorf("the host workspace changed without apply:\nbefore\n%s\nafter\n%s", before, after)
	}
	cps, err := s.Checkpoints()
	if err != nil || len(cps) != 2 {
		f.t.Errorf("Checkpoints: %v %v", cps, err)
	}
	direct := f.open(sandbash.Config{Workspace: f.dir("ws2")})
	if _, err := direct.Diff(f.ctx); !errors.Is(err, sandbash.ErrNotOverlay) {
		f.t.Errorf("Diff of a direct-mode session: %v", err)
	}
}

// liveMounts lists the distinct overlay filesystems (superblocks) whose
// upper layer is in the session's staged or own directory, in any mount
// namespace of the host.
func liveMounts(session string) []string {
	devs := map[string]bool{}
	for _, line := range mountsMentioning("upperdir=") {
		if !strings.Contains(line, session) || !strings.Contains(line, "/upper") || !strings.Contains(line, "userxattr") {
			continue
		}
		_, rest, _ := strings.Cut(line, ": ")
		if fields := strings.Fields(rest); len(fields) > 2 {
			devs[fields[2]] = true
		}
	}
	var out []string
	for d := range devs {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// testReviewApplyRefuses: what a call plants in its layer for the user to
// apply does not reach the host: git hooks and configuration, or a write
// through a symlink it put where a directory of an earlier layer was; nor
// does apply write through a symlink that replaced a directory on the
// host meanwhile.
func testReviewApplyRefuses(f *fixture) {
	if f.refused(f.caps.Refuses.Overlay, sandbash.Config{WorkspaceMode: sandbash.WorkspaceOverlay}) {
		return
	}
	ws, outside := f.dir("ws"), f.dir("outside")
	writeFiles(f, ws, map[string]string{"file.txt": "one\n", "hostdir/keep": "keep\n"})
	git(f, ws, "init", "-q")
	git(f, ws, "add", "file.txt")
	git(f, ws, "commit", "-qm", "first")
	chownTree(f, ws)
	gitBefore := gitState(f, filepath.Join(ws, ".git"))
	s := f.openOverlay(ws)
	f.expect(s, "mkdir -p out && echo planted > out/passwd", 0, "")
	if err := s.Checkpoint(f.ctx, "planted"); err != nil {
		f.t.Fatal(err)
	}
	f.expect(s, `rm -rf out && ln -s `+outside+` out &&
mkdir -p .git/hooks && printf '#!/bin/sh\necho pwned\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit &&
printf '[core]\n\tfsmonitor = "echo pwned"\n' >> .git/config && mkdir -p .git/info && echo '* filter=evil' > .git/info/attributes &&
echo two >> file.txt && echo new > hostdir/new.txt && echo done`, 0, "done\n")
	cs, _ := changeList(f, s)
	var patch bytes.Buffer
	if err := cs.WritePatch(&patch); err != nil {
		f.t.Fatal(err)
	}
	if strings.Contains(patch.String(), "pwned") || strings.Contains(patch.String(), "filter=evil") {
		f.t.Errorf("the patch carries what apply refuses:\n%s", patch.String())
	}
	// On the host, hostdir becomes a symlink to outside, as a race would
	// make it.
	if err := os.Rename(filepath.Join(ws, "hostdir"), filepath.Join(f.base, "hostdir-moved")); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "hostdir")); err != nil {
		f.t.Fatal(err)
	}
	res, err := s.Apply(f.ctx)
	if err != nil {
		f.t.Fatalf("Apply: %v", err)
	}
	var refused []string
	for _, r := range res.Refused {
		refused = append(refused, r.Path)
	}
	sort.Strings(refused)
	if got, want := strings.Join(refused, " "), ".git/config .git/hooks/pre-commit .git/info/attributes hostdir hostdir/new.txt"; got != want {
		f.t.Errorf("refused %q, want %q (%+v)", got, want, res.Refused)
	}
	if after := gitState(f, filepath.Join(ws, ".git")); after != gitBefore {
		f.t.Errorf("apply changed the repository's hooks or configuration:\nbefore\n%s\nafter\n%s", gitBefore, after)
	}
	if entries, _ := os.ReadDir(outside); len(entries) > 0 {
		f.t.Errorf("apply wrote outside the workspace, through the session's symlink: %v", entries)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(b) != "one\ntwo\n" {
		f.t.Errorf("file.txt was not applied: %q", b)
	}
}

// testReviewHostSocket: a socket a host process listens on in the
// workspace is masked in the overlay view too, wherever a call moves,
// links or copies it, and after the sandbox reopens for a checkpoint.
func testReviewHostSocket(f *fixture) {
	if f.refused(f.caps.Refuses.Overlay, sandbash.Config{WorkspaceMode: sandbash.WorkspaceOverlay}) {
		return
	}
	probe := buildProbe(f)
	ws := f.dir("ws")
	socks := map[string]*hostListener{
		"top":  listen(f, filepath.Join(ws, "agent.sock")),
		"deep": listen(f, filepath.Join(ws, "deep/er/daemon.sock")),
	}
	s := f.open(sandbash.Config{Workspace: ws, Readable: []string{filepath.Dir(probe)}, WorkspaceMode: sandbash.WorkspaceOverlay})
	f.expect(s, probe+" agent.sock deep/er/daemon.sock", 0, "")
	f.run(s, `{ mv deep deep2; mv deep2/er deep2/er2; ln agent.sock hard.sock; cp -a agent.sock copy.sock; } 2>/dev/null; true`)
	all := probe + " agent.sock deep/er/daemon.sock deep2/er2/daemon.sock deep2/er/daemon.sock hard.sock copy.sock; true"
	f.expect(s, all, 0, "")
	if err := s.Checkpoint(f.ctx, "moved"); err != nil {
		f.t.Fatal(err)
	}
	f.expect(s, all, 0, "")
	for name, h := range socks {
		if n := h.accepted.Load(); n > 0 {
			f.t.Errorf("the host socket (%s) accepted %d connections from the sandbox", name, n)
		}
	}
	// The probe works: a socket the call listens on itself is reachable.
	f.expect(s, probe+" -serve /tmp/own.sock & while [ ! -S /tmp/own.sock ]; do sleep 0.05; done; "+probe+" /tmp/own.sock; kill %1", 0, "connected /tmp/own.sock\n")
}
