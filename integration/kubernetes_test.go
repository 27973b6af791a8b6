package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/kubernetes/testcluster"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// TestKubernetesCLI: the CLI on the test cluster of scripts/k8s.sh: a
// one-shot run with --claim (exit status, the workspace owner's uid, the
// same path, the command's stderr in its output), a timeout (124), a refusal
// (125: caches; --pids, which a pod spec cannot set), a CLI session that keeps --namespace and --claim for its
// runs, doctor's report of the cluster and gc; no pod left.
func TestKubernetesCLI(t *testing.T) {
	cs, err := testcluster.Clientset()
	if err != nil {
		backendtest.Unavailable(t, "kubernetes", err)
	}
	ctx := context.Background()
	unseccomp, err := testcluster.InstallSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unseccomp)
	c := newCLI(t)
	root := filepath.Dir(c.dir) // the workspace and the CLI's state are under it
	unclaim, err := testcluster.LocalClaim(ctx, cs, "default", "sandbash-cli", root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unclaim)
	if err := os.Chown(c.dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	k8s := []string{"--backend", "kubernetes", "--image", "sandbash-test:latest", "--namespace", "default", "--claim", "sandbash-cli:" + root}

	out, errOut, code := c.run(append(append([]string{"run"}, k8s...), "--", "id -u; pwd; echo err >&2; exit 3")...)
	if code != 3 || out != "4242\n"+c.dir+"\nerr\n" {
		t.Errorf("run: exit %d, stdout %q, stderr %q; want 3, the owner's uid, the workspace's path and the command's stderr", code, out, errOut)
	}
	out, errOut, code = c.run(append(append([]string{"run", "--timeout", "1"}, k8s...), "--", "echo partial; sleep 30")...)
	if code != 124 || out != "partial\n" {
		t.Errorf("timeout: exit %d, stdout %q, stderr %q; want 124 and the partial output", code, out, errOut)
	}
	out, errOut, code = c.run(append(append([]string{"run", "--cache", "go"}, k8s...), "--", "echo ran")...)
	if code != 125 || strings.Contains(out, "ran") || !strings.Contains(errOut, "caches are not supported on Kubernetes") {
		t.Errorf("--cache: exit %d, stdout %q, stderr %q; want 125, nothing run, the reason", code, out, errOut)
	}
	out, errOut, code = c.run(append(append([]string{"run", "--pids", "100"}, k8s...), "--", "echo ran")...)
	if code != 125 || strings.Contains(out, "ran") || !strings.Contains(errOut, "--pids: a pod's process limit is its node's") {
		t.Errorf("--pids: exit %d, stdout %q, stderr %q; want 125, nothing run, the reason", code, out, errOut)
	}
	_, errOut, code = c.run(append(append([]string{"run"}, k8s[:6]...), "--", "true")...)
	if code != 125 || !strings.Contains(errOut, "--claim NAME:ROOT") {
		t.Errorf("without --claim: exit %d, stderr %q; want 125 and the flag to give", code, errOut)
	}

	// A CLI session keeps the backend's flags for its runs.
	out, errOut, code = c.run(append([]string{"session", "open"}, k8s...)...)
	id := strings.TrimSpace(out)
	if code != 0 || id == "" {
		t.Fatalf("session open: exit %d, %q %q", code, out, errOut)
	}
	c.run("run", "--session", id, "--", "echo kept > kept")
	if out, errOut, code = c.run("run", "--session", id, "--", "cat kept; cat /etc/hostname"); code != 0 || out != "kept\nsandbash\n" {
		t.Errorf("session run: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code = c.run("session", "close", id); code != 0 {
		t.Errorf("session close: exit %d, %s", code, errOut)
	}

	out, _, _ = c.run("doctor", "--namespace", "default", "--claim", "sandbash-cli:"+root)
	for _, w := range []string{"kubernetes: available: Kubernetes v", "namespace default", "pods/exec", "workspace claim: sandbash-cli, seen at " + root} {
		if !strings.Contains(out, w) {
			t.Errorf("doctor does not say %q:\n%s", w, out)
		}
	}
	if _, errOut, code = c.run("gc", "--namespace", "default"); code != 0 {
		t.Errorf("gc: exit %d, %s", code, errOut)
	}
	ps, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: container.LabelSession})
	if err != nil {
		t.Fatal(err)
	}
	// Only this test's pods: those on its claim (the Kubernetes package's
	// tests, run alongside, have pods of their own in the namespace).
	for _, p := range ps.Items {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == "sandbash-cli" {
				t.Errorf("pod left: %s (%s)", p.Name, p.Status.Phase)
			}
		}
	}
}

// TestKubernetesBuildHandOff: sandbash is built without the Kubernetes
// client and hands what needs it (--backend kubernetes, also in mcp,
// doctor, gc) to sandbash-kubernetes next to it, with the same arguments
// and the environment it started with (mcp unsets the token variable
// once read); without that build, it refuses and says how to get it. A
// copy of sandbash standing in for the build refuses rather than loop, and
// one in the working directory is never run, whatever PATH says (relative
// entries, or the workspace's own directory, as an activated virtualenv
// puts it there).
func TestKubernetesBuildHandOff(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	bin := copyBinary(t, dir, "sandbash")
	run := func(env []string, args ...string) (string, string, int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = c.dir
		cmd.Env = append(append(c.env, "PATH=/usr/bin:/bin"), env...)
		var o, e strings.Builder
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatal(err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}
	out, errOut, code := run(nil, "run", "--backend", "kubernetes", "--image", "sandbash-test:latest", "--", "echo ran")
	if code != 125 || strings.Contains(out, "ran") || !strings.Contains(errOut, "sandbash-kubernetes, the build with it, is not in "+dir+", where sandbash looks for it (never on PATH)") {
		t.Errorf("without sandbash-kubernetes: exit %d, stdout %q, stderr %q; want 125 and where to install it", code, out, errOut)
	}
	if out, _, _ := run(nil, "doctor"); !strings.Contains(out, "kubernetes: unavailable: this sandbash is built without the Kubernetes client") {
		t.Errorf("doctor without sandbash-kubernetes does not say it is missing:\n%s", out)
	}

	// A stand-in for the build, which says what it was given.
	fake := "#!/bin/sh\necho \"handed: $*; token: $SANDBASH_MCP_TOKEN\"\n"
	if err := os.WriteFile(filepath.Join(dir, "sandbash-kubernetes"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"run", "--backend", "kubernetes", "--", "true"}, nil, "handed: run --backend kubernetes -- true; token: \n"},
		{[]string{"mcp", "--backend", "kubernetes"}, []string{"SANDBASH_MCP_TOKEN=t0ken"}, "handed: mcp --backend kubernetes; token: t0ken\n"},
		{[]string{"doctor"}, nil, "handed: doctor; token: \n"},
		{[]string{"gc"}, nil, "handed: gc; token: \n"},
	} {
		if out, errOut, code := run(tc.env, tc.args...); code != 0 || out != tc.want {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// A sandbash-kubernetes that is not the build with Kubernetes (a copy
	// of sandbash) refuses rather than hand the command on again.
	if err := os.Remove(filepath.Join(dir, "sandbash-kubernetes")); err != nil {
		t.Fatal(err)
	}
	copyBinary(t, dir, "sandbash-kubernetes")
	if out, errOut, code := run(nil, "doctor"); code == 0 || !strings.Contains(errOut, "it is a build of sandbash without the Kubernetes backend") {
		t.Errorf("doctor handed to a build without Kubernetes: exit %d, stdout %q, stderr %q; want a refusal that says so", code, out, errOut)
	}
	if err := os.Remove(filepath.Join(dir, "sandbash-kubernetes")); err != nil {
		t.Fatal(err)
	}

	// A sandbash-kubernetes in the working directory (the workspace, which
	// calls write) is never run, whatever relative entries PATH has.
	mark := filepath.Join(t.TempDir(), "ran")
	planted := filepath.Join(c.dir, "sandbash-kubernetes")
	if err := os.WriteFile(planted, []byte("#!/bin/sh\ntouch "+mark+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{".:/usr/bin:/bin", ":/usr/bin:/bin", "/usr/bin:/bin:", c.dir + ":/usr/bin:/bin"} {
		run([]string{"PATH=" + path}, "gc")
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("with PATH=%s, gc ran the workspace's sandbash-kubernetes", path)
		}
	}
	os.Remove(planted)

	// Other backends stay in sandbash itself.
	if out, errOut, code := run(nil, "run", "--backend", "bwrap", "--", "echo here"); code != 0 || out != "here\n" {
		t.Errorf("bwrap: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
