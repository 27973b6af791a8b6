package backendtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/internal/hostmount"
)

// otherUser is a host uid and gid that owns nothing the suite mounts: the
// other local user who must not reach a session's files.
const otherUser = 65534

// testStagingPrivate: as root, sandbash stages every mount of a session in
// /run/sandbash/<session>/. That must not open them to other local users:
// a workspace and a readable path kept in directories only root may enter
// stay out of their reach, both for a user's workspace and for a root-owned
// (idmapped) one.
func testStagingPrivate(f *fixture) {
	if asUser() {
		stagesNothingAsUser(f)
		return
	}
	private := filepath.Join(f.base, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		f.t.Fatal(err)
	}
	for _, owner := range []int{f.uid, 0} {
		dir := filepath.Join(private, "owner"+strconv.Itoa(owner))
		ws, ro := filepath.Join(dir, "ws"), filepath.Join(dir, "ro")
		if owner == 0 && f.rootRefused(ws) {
			continue
		}
		for _, d := range []string{dir, ws, ro} {
			if err := os.Mkdir(d, 0o755); err != nil {
				f.t.Fatal(err)
			}
			if err := os.Chown(d, owner, owner); err != nil {
				f.t.Fatal(err)
			}
		}
		for _, d := range []string{ws, ro} {
			if err := os.WriteFile(filepath.Join(d, "file"), []byte("private\n"), 0o644); err != nil {
				f.t.Fatal(err)
			}
		}
		if out, err := readAs(filepath.Join(ws, "file")); err == nil {
			f.t.Fatalf("uid %d reads %s directly (%q): the test cannot tell", otherUser, ws, out)
		}
		s := f.open(sandbash.Config{Workspace: ws, Readable: []string{ro}})
		f.expect(s, "cat file "+ro+"/file", 0, "private\nprivate\n")
		for _, m := range stagedFor(s.ID()) {
			for _, p := range []string{m, filepath.Join(m, "file")} {
				if out, err := readAs(p); err == nil {
					f.t.Errorf("workspace owned by %d: another local user (uid %d) reads %s, the staged mount of a path in a directory closed to them: %q", owner, otherUser, p, out)
				}
			}
		}
		if err := s.Close(); err != nil {
			f.t.Error(err)
		}
	}
}

// stagedFor lists the mount points staged for a session.
func stagedFor(id string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if fs := strings.Fields(line); len(fs) > 4 && strings.HasPrefix(fs[4], hostmount.Root+"/"+id+"/") {
			out = append(out, fs[4])
		}
	}
	return out
}

// readAs reads p (a file, or lists a directory) as otherUser.
func readAs(p string) (string, error) {
	cmd := exec.Command("/bin/cat", p)
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		cmd = exec.Command("/bin/ls", "-a", p)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: otherUser, Gid: otherUser, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// testSubmounts: a call sees the workspace as the host does, mounts inside
// it included: what a submount holds, not what it covers on the host (a
// directory hidden there by a mount must stay hidden in the sandbox), for
// a user's workspace and for a root-owned (idmapped) one.
func testSubmounts(f *fixture) {
	if asUser() {
		submountAsUser(f)
		return
	}
	for _, owner := range []int{f.uid, 0} {
		ws := filepath.Join(f.base, "ws"+strconv.Itoa(owner))
		sub := filepath.Join(ws, "sub")
		if owner == 0 && f.rootRefused(ws) {
			continue
		}
		if err := os.MkdirAll(sub, 0o755); err != nil {
			f.t.Fatal(err)
		}
		if err := os.Chown(ws, owner, owner); err != nil {
			f.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sub, "covered"), []byte("hidden on the host\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		opts := fmt.Sprintf("size=1m,mode=0755,uid=%d,gid=%d", owner, owner)
		if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, opts); err != nil {
			f.t.Fatal(err)
		}
		f.t.Cleanup(func() {
			if err := syscall.Unmount(sub, syscall.MNT_DETACH); err != nil {
				f.t.Error(err)
			}
		})
		if err := os.WriteFile(filepath.Join(sub, "mounted"), []byte("on the submount\n"), 0o644); err != nil {
			f.t.Fatal(err)
		}
		if f.refused(f.caps.Refuses.Submounts, sandbash.Config{Workspace: ws}) {
			continue
		}
		s := f.open(sandbash.Config{Workspace: ws})
		f.expect(s, "ls sub; cat sub/*; echo new > sub/new", 0, "mounted\non the submount\n")
		if b, err := os.ReadFile(filepath.Join(sub, "new")); err != nil || string(b) != "new\n" {
			f.t.Errorf("workspace owned by %d: a file written to the submount: host sees %q, %v", owner, b, err)
		}
	}
}

// testNoIdmapIsClear: as root with a root-owned workspace, a session
// directory on a filesystem without idmapped mounts (overlayfs: the root
// filesystem of a container sandbash runs in) fails Open with an error
// that names it and says where to put it instead, and leaves nothing.
func testNoIdmapIsClear(f *fixture) {
	if asUser() {
		f.rootWorkspaceAsUser()
		return
	}
	ws := filepath.Join(f.base, "rootws")
	if f.rootRefused(ws) {
		return
	}
	ov := filepath.Join(f.base, "ov")
	for _, d := range []string{ws, ov + "/lower", ov + "/upper", ov + "/work", ov + "/merged"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.t.Fatal(err)
		}
	}
	merged := filepath.Join(ov, "merged")
	opts := "lowerdir=" + ov + "/lower,upperdir=" + ov + "/upper,workdir=" + ov + "/work"
	if err := syscall.Mount("overlay", merged, "overlay", 0, opts); err != nil {
		f.t.Skipf("no overlayfs here: %v", err)
	}
	f.t.Cleanup(func() {
		if err := syscall.Unmount(merged, syscall.MNT_DETACH); err != nil {
			f.t.Error(err)
		}
	})
	id := "noidmap" + marker()[6:18]
	_, err := sandbash.Open(f.ctx, f.b, sandbash.Config{ID: id, Workspace: ws, ParentDir: merged, Image: f.caps.Image})
	if err == nil {
		f.t.Skip("this kernel idmaps overlayfs mounts")
	}
	if msg := err.Error(); !strings.Contains(msg, merged) || !strings.Contains(msg, "session directory") {
		f.t.Errorf("Open with the session directory on overlayfs: %q; want an error that names the session directory (under %s) and where else to put it", msg, merged)
	}
	if left, _ := os.ReadDir(merged); len(left) > 0 {
		f.t.Errorf("Open failed but left %v in %s", left, merged)
	}
	if _, err := os.Stat(filepath.Join(hostmount.Root, id)); err == nil {
		f.t.Errorf("Open failed but left %s", filepath.Join(hostmount.Root, id))
	}
}
