package kubernetes

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

// TestDeepestMount: the claim found for a workspace is the one mounted at
// the deepest path that holds it as a path (not as a string: /claim2 is
// not in /claim), after its symlinks.
func TestDeepestMount(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"claim/sub/ws", "claim2/ws", "claim/ws"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink on the outer claim that leads into the inner one.
	if err := os.Symlink(filepath.Join(dir, "claim/sub/ws"), filepath.Join(dir, "claim/link")); err != nil {
		t.Fatal(err)
	}
	claims := map[string]string{dir + "/claim": "a", dir + "/claim/sub": "b", dir + "/claim2": "c"}
	for _, tc := range []struct{ ws, want string }{
		{"claim/sub/ws", "claim/sub"},
		{"claim/ws", "claim"},
		{"claim2/ws", "claim2"},
		{"claim", "claim"},
		{"claim/link", "claim/sub"},
		{"claim22", ""},
		{"elsewhere", ""},
	} {
		want := ""
		if tc.want != "" {
			want = filepath.Join(dir, tc.want)
		}
		if got := deepestMount(claims, filepath.Join(dir, tc.ws)); got != want {
			t.Errorf("deepestMount(%s) = %q, want %q", tc.ws, got, want)
		}
	}
	if got := deepestMount(claims, ""); got != "" {
		t.Errorf("no workspace: %q, want none", got)
	}
}

// TestNoSubmountsUnderTheClaim: a path that sits on a mount inside the
// claim's root (a subPath, an emptyDir, a bind) is refused: a pod mounts
// the claim's own directory there, so calls would see another tree than
// the one sandbash checked. A path on the claim itself passes.
func TestNoSubmountsUnderTheClaim(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount") // the package's tests run as root only (scripts/test-user.sh)
	}
	root := t.TempDir()
	sub := filepath.Join(root, "sub")
	for _, d := range []string{sub, filepath.Join(root, "ws"), filepath.Join(root, "t"), filepath.Join(root, "h")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("tmpfs", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(sub, unix.MNT_DETACH) })
	if err := os.Mkdir(filepath.Join(sub, "ws"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := func(src string) *shared.Spec {
		return &shared.Spec{SessionSpec: &backend.SessionSpec{TmpDir: filepath.Join(root, "t"), HomeDir: filepath.Join(root, "h"), Mounts: []backend.Mount{{Source: src, Target: "/w"}}}}
	}
	if err := noSubmounts(spec(filepath.Join(root, "ws")), root); err != nil {
		t.Errorf("a workspace on the claim itself: %v", err)
	}
	for _, src := range []string{filepath.Join(sub, "ws"), sub} {
		if err := noSubmounts(spec(src), root); err == nil || !strings.Contains(err.Error(), "is on a mount at "+sub) {
			t.Errorf("a workspace on a mount inside the claim (%s): %v; want a refusal that names the mount", src, err)
		}
	}
	// The claim's root may itself be a mount (in a pod it is).
	if err := noSubmounts(spec(filepath.Join(sub, "ws")), sub); err != nil {
		t.Errorf("a workspace on a claim mounted at its root: %v", err)
	}
}

// TestClaimMounts: the claims a pod mounts whole, by path; a subPath is
// not the claim's root; where two containers mount different claims at
// one path, the spec cannot say which is sandbash's, and the path is
// marked so (findClaim then refuses to guess).
func TestClaimMounts(t *testing.T) {
	pvc := func(name, claim string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
	}
	p := &corev1.Pod{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{pvc("a", "claim-a"), pvc("b", "claim-b"), {Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		Containers: []corev1.Container{
			{Name: "runner", VolumeMounts: []corev1.VolumeMount{{Name: "a", MountPath: "/work/"}, {Name: "a", MountPath: "/part", SubPath: "x"}, {Name: "e", MountPath: "/scratch"}, {Name: "a", MountPath: "/shared"}}},
			{Name: "sidecar", VolumeMounts: []corev1.VolumeMount{{Name: "a", MountPath: "/work"}, {Name: "b", MountPath: "/shared"}}},
		},
	}}
	// A container with an emptyDir where another mounts a claim, and one
	// with a subPath of a claim where another mounts a claim whole.
	p.Spec.Containers = append(p.Spec.Containers,
		corev1.Container{Name: "third", VolumeMounts: []corev1.VolumeMount{{Name: "e", MountPath: "/mixed"}, {Name: "b", MountPath: "/sub", SubPath: "y"}}},
		corev1.Container{Name: "fourth", VolumeMounts: []corev1.VolumeMount{{Name: "b", MountPath: "/mixed"}, {Name: "a", MountPath: "/sub"}}})
	got := claimMounts(p)
	want := map[string]string{"/work": "claim-a", "/shared": ambiguousClaim, "/mixed": ambiguousClaim, "/sub": ambiguousClaim}
	if len(got) != len(want) {
		t.Errorf("claimMounts = %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("claimMounts[%s] = %q, want %q", k, got[k], v)
		}
	}
}
