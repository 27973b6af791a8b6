package bwrap

import (
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/workspace"
)

// TestEtcCopies: of /etc's allowlist, a call gets a copy of the regular
// files every user may read, as they are when it starts, and the rest
// bound: it reads nothing its user could not read on the host. So does a
// one-shot session's call, whose bwrap reads the files themselves.
func TestEtcCopies(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the call as another user than the files'")
	}
	for _, oneShot := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "one-shot"}[oneShot], func(t *testing.T) {
			testEtcCopies(t, oneShot)
		})
	}
}

func testEtcCopies(t *testing.T, oneShot bool) {
	b, err := New(WithOneShot(oneShot))
	if err != nil {
		t.Skipf("bwrap: %v", err)
	}
	dir := openTempDir(t)
	write := func(name, content string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("open.conf", "open 1\n", 0o644)
	write("closed.conf", "closed secret\n", 0o600)
	write("group-only.conf", "group secret\n", 0o640)
	if err := os.Symlink("open.conf", filepath.Join(dir, "link.conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("sub.d/inner", "inner\n", 0o644)
	oldDir, oldList := etcDir, etcAllowlist
	etcDir, etcAllowlist = dir, []string{"open.conf", "closed.conf", "group-only.conf", "link.conf", "sub.d", "missing.conf"}
	defer func() { etcDir, etcAllowlist = oldDir, oldList }()

	s, err := b.Open(context.Background(), otherUserSpec(t, 4242))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	run := func(cmd string) string {
		t.Helper()
		var out bytes.Buffer
		p, err := s.Start(context.Background(), &backend.Call{Command: cmd, Output: &out})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			t.Fatalf("%s: %v: %s", cmd, err, out.String())
		}
		return out.String()
	}
	out := run(`cd /etc; for f in open.conf closed.conf group-only.conf link.conf sub.d/inner missing.conf; do printf '%s: ' $f; cat $f 2>&1 | tr '\n' ' '; echo; done; stat -c '%n %u %a' open.conf closed.conf`)
	for _, want := range []string{"open.conf: open 1", "link.conf: open 1", "sub.d/inner: inner", "missing.conf: cat: missing.conf: No such file", "open.conf 4242 444"} {
		if !strings.Contains(out, want) {
			t.Errorf("the call's /etc: no %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret") {
		t.Errorf("the call read a file of /etc its user cannot read on the host:\n%s", out)
	}
	if strings.Contains(out, "closed.conf 4242") {
		t.Errorf("a file not every user may read was copied, not bound:\n%s", out)
	}
	// A change shows in the next call, even one that keeps the size and
	// (to the second) the time.
	write("open.conf", "open 2\n", 0o644)
	if out := run("cat /etc/open.conf"); out != "open 2\n" {
		t.Errorf("after a change, the next call's copy: %q", out)
	}
	now := time.Now()
	write("open.conf", "open 3\n", 0o644)
	_ = os.Chtimes(filepath.Join(dir, "open.conf"), now, now)
	if out := run("cat /etc/open.conf"); out != "open 3\n" {
		t.Errorf("after a change of the same size, the next call's copy: %q", out)
	}
}

// otherUserSpec is a session running its calls as uid:uid, with a
// workspace, /tmp and HOME of its own.
func otherUserSpec(t *testing.T, uid int) *backend.SessionSpec {
	base := openTempDir(t)
	mk := func(name string) string {
		d := filepath.Join(base, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
		return d
	}
	ws := mk("ws")
	sp := &backend.SessionSpec{
		ID: "t" + hex.EncodeToString(randBytes(6)), Workspace: ws,
		Mounts: []backend.Mount{{Source: ws, Target: ws}},
		TmpDir: mk("tmp"), HomeDir: mk("home"), UID: uid, GID: uid, Network: backend.NetworkNone,
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + backend.Home},
	}
	if err := workspace.Seal(sp); err != nil {
		t.Fatal(err)
	}
	return sp
}

// openTempDir is a temporary directory that every user may enter, removed
// when the test ends.
func openTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sbbwrap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
