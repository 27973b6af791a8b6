package bwrap

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeRoot makes a root directory holding files (path: content).
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for f, content := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestUsernsRestriction: each kernel setting that blocks user namespaces
// is named, with its fix, for the uids it blocks; inside a container, what
// its runtime does (a seccomp filter that refuses user namespaces, masked
// /proc, AppArmor) is named with the options that lift it; a host with
// none of them names nothing, and one-shot sessions skip their probe there.
func TestUsernsRestriction(t *testing.T) {
	open := map[string]string{
		"proc/sys/user/max_user_namespaces":                     "15000\n",
		"proc/sys/kernel/unprivileged_userns_clone":             "1\n",
		"proc/sys/kernel/apparmor_restrict_unprivileged_userns": "0\n",
		"proc/self/status":                                      "Name:\tsandbash\nSeccomp:\t0\nSeccomp_filters:\t0\n",
		"proc/self/mountinfo":                                   "22 1 0:21 / /proc rw - proc proc rw\n23 22 0:40 / /proc/sys/fs/binfmt_misc rw - autofs systemd-1 rw\n",
		"proc/1/environ":                                        "HOME=/\x00TERM=linux\x00",
	}
	with := func(changes map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range open {
			m[k] = v
		}
		for k, v := range changes {
			m[k] = v
		}
		return m
	}
	masked := "22 1 0:21 / /proc rw - proc proc rw\n30 22 0:5 /null /proc/kcore rw - devtmpfs udev rw\n31 22 0:5 /null /proc/keys rw - devtmpfs udev rw\n32 22 0:50 / /proc/acpi ro - tmpfs tmpfs ro\n33 22 0:50 / /proc/scsi ro - tmpfs tmpfs ro\n"
	// Root in a container: no CAP_SYS_ADMIN (Docker's default set).
	filtered := "Name:\tsandbash\nUid:\t0\t0\t0\t0\nCapEff:\t00000000a80425fb\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	userFiltered := "Name:\tsandbash\nUid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\nSeccomp:\t2\nSeccomp_filters:\t1\n"
	eperm := syscall.EPERM
	for _, c := range []struct {
		name   string
		files  map[string]string
		uid    int
		userns error
		want   []string // in the text, in order
		not    []string
	}{
		{name: "max_user_namespaces", files: with(map[string]string{"proc/sys/user/max_user_namespaces": "0\n"}), uid: 0, userns: syscall.ENOSPC,
			want: []string{"sysctl -w user.max_user_namespaces="}},
		{name: "unprivileged_userns_clone", files: with(map[string]string{"proc/sys/kernel/unprivileged_userns_clone": "0\n"}), uid: 1000, userns: eperm,
			want: []string{"sysctl -w kernel.unprivileged_userns_clone=1"}},
		{name: "apparmor", files: with(map[string]string{"proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"}), uid: 1000,
			want: []string{"apparmor_restrict_unprivileged_userns=0"}},
		{name: "docker", files: with(map[string]string{".dockerenv": "", "proc/self/status": filtered, "proc/self/mountinfo": masked}), uid: 0, userns: eperm,
			want: []string{"inside a Docker container", "a seccomp filter refuses to create user namespaces (operation not permitted)", "/proc/kcore, /proc/keys, /proc/acpi, 1 more", "--backend docker or podman with an image", "`--security-opt seccomp=unconfined --security-opt systempaths=unconfined --cap-add SYS_ADMIN`", "sandbash as root stages"},
			not:  []string{"sysctl", "apparmor"}},
		{name: "docker, not root", files: with(map[string]string{".dockerenv": "", "proc/self/status": userFiltered, "proc/self/mountinfo": masked}), uid: 1000, userns: eperm,
			want: []string{"inside a Docker container", "`--security-opt seccomp=unconfined --security-opt systempaths=unconfined`, or with --privileged"},
			not:  []string{"SYS_ADMIN"}},
		{name: "podman", files: with(map[string]string{"run/.containerenv": "", "proc/self/status": filtered, "proc/self/mountinfo": masked}), uid: 0,
			want: []string{"inside a Podman container", "a seccomp filter is in force", "parts of /proc are masked", "`--security-opt seccomp=unconfined --security-opt unmask=ALL --cap-add SYS_ADMIN`"},
			not:  []string{"refuses to create user namespaces"}},
		{name: "lxc, AppArmor", files: with(map[string]string{"proc/1/environ": "container=lxc\x00", "proc/self/attr/current": "lxc-container-default-cgns (enforce)\n"}), uid: 0,
			want: []string{"inside a container (lxc)", "AppArmor confines it (profile lxc-container-default-cgns (enforce))", "`--security-opt apparmor=unconfined`"}},
		{name: "systemd RestrictNamespaces", files: with(map[string]string{"proc/self/status": userFiltered}), uid: 1000, userns: eperm,
			want: []string{"runs confined: a seccomp filter refuses", "RestrictNamespaces="}},
		{name: "root is spared the unprivileged switches", files: with(map[string]string{"proc/sys/kernel/unprivileged_userns_clone": "0\n", "proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1\n"}), uid: 0},
		{name: "nothing", files: open, uid: 1000},
	} {
		root := fakeRoot(t, c.files)
		got := usernsRestriction(root, c.uid, c.userns)
		rest := got
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: %q, want %q (in this order: %q)", c.name, got, w, c.want)
				break
			}
			rest = rest[i+len(w):]
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: %q names %q", c.name, got, n)
			}
		}
		if (got != "") != (len(c.want) > 0) {
			t.Errorf("%s: %q", c.name, got)
		}
		// The one-shot check runs the probe wherever one may apply.
		if may := mayBeRestricted(root, c.uid); may != (len(c.want) > 0) {
			t.Errorf("%s: mayBeRestricted = %v", c.name, may)
		}
	}
	// A marker file alone (a VM built from a container image keeps
	// /.dockerenv) refuses nothing: no probe for it.
	if mayBeRestricted(fakeRoot(t, with(map[string]string{".dockerenv": ""})), 1000) {
		t.Error("mayBeRestricted: true for a /.dockerenv with nothing in force")
	}
	if !mayBeRestricted("/", os.Geteuid()) {
		if err := cloneUserns(); err != nil {
			t.Errorf("no setting restricts user namespaces here, yet: %v", err)
		}
	}
}
