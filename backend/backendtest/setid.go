package backendtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/internal/hostmount"
)

// testNoPrivilegedFiles: what a call leaves in a root-owned workspace (or
// its /tmp and HOME) belongs to root on the host, through the idmap, so it
// must never leave a setuid or setgid file, or one with file capabilities:
// any local user who can reach the workspace would run it as root. The
// call tries chmod, mkdir -m, and setcap from a user namespace of its own.
// A setuid file already there is refused at open: a write through a shared
// mapping, unlike write(2), keeps its bits.
func testNoPrivilegedFiles(f *fixture) {
	if asUser() {
		f.rootWorkspaceAsUser()
		return
	}
	ws := filepath.Join(f.base, "rootws")
	if f.rootRefused(ws) {
		return
	}
	if err := os.Mkdir(ws, 0o755); err != nil {
		f.t.Fatal(err)
	}
	victim := filepath.Join(ws, "victim")
	if err := os.WriteFile(victim, []byte("original\n"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o755|fs.ModeSetuid); err != nil {
		f.t.Fatal(err)
	}
	refused, err := sandbash.Open(context.Background(), f.b, sandbash.Config{Workspace: ws, Image: f.caps.Image})
	if refused != nil {
		refused.Close()
	}
	if !errors.Is(err, hostmount.ErrPrivileged) || !strings.Contains(err.Error(), victim) {
		f.t.Errorf("Open with a setuid-root file in a root-owned workspace: %v; want a refusal naming %s", err, victim)
	}
	if err := os.Remove(victim); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: ws})
	f.run(s, `b=$(command -v bash)
for d in . /tmp ~; do
  cp "$b" $d/suid; chmod 4755 $d/suid
  cp "$b" $d/sgid; chmod 2755 $d/sgid
  mkdir -m 2775 $d/sgiddir; mkdir $d/sgiddir2; chmod g+s $d/sgiddir2
  cp "$b" $d/fcap; unshare -Ur setcap cap_setuid,cap_setgid+ep $d/fcap
done 2>/dev/null
cp -r /tmp ./fromtmp; cp -r ~ ./fromhome
true`)
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			st := fi.Sys().(*syscall.Stat_t)
			f.t.Errorf("the call left %s %v, owned by %d:%d on the host", p, fi.Mode(), st.Uid, st.Gid)
		}
		if n, err := unix.Lgetxattr(p, "security.capability", nil); err == nil && n > 0 {
			f.t.Errorf("the call left %s with file capabilities on the host", p)
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	// What another local user gains.
	cmd := exec.Command(filepath.Join(ws, "suid"), "-p", "-c", "id -u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUser, Gid: otherUser, Groups: []uint32{}}}
	if out, err := cmd.Output(); err == nil && strings.TrimSpace(string(out)) == "0" {
		f.t.Errorf("uid %d runs %s as root on the host", otherUser, filepath.Join(ws, "suid"))
	}
}
