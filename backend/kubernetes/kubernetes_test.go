package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/backendtest"
	sbk8s "github.com/sandbash/sandbash/backend/kubernetes"
	"github.com/sandbash/sandbash/backend/kubernetes/testcluster"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/owner"
)

// The test images of scripts/k8s.sh's cluster, and the claim of the
// node's temporary directory.
const (
	testImage = "sandbash-test:latest"
	claimName = "sandbash-test-tmp"
)

// claimRoot is the node directory the test's local volume holds: the
// conformance suite's workspaces and the sessions' directories are under
// the host's temporary directory.
var claimRoot = os.TempDir()

func clientset(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	if os.Getenv("KUBECONFIG") == "" {
		if _, err := os.Stat(testcluster.Kubeconfig); err == nil {
			t.Setenv("KUBECONFIG", testcluster.Kubeconfig)
		}
	}
	cs, err := testcluster.Clientset()
	if err != nil {
		backendtest.Unavailable(t, "kubernetes", err)
	}
	return cs
}

// localClaim makes the claim of the node's temporary directory (see
// testcluster.LocalClaim) for the test.
func localClaim(t *testing.T, cs *kubernetes.Clientset) {
	t.Helper()
	cleanup, err := testcluster.LocalClaim(context.Background(), cs, "default", claimName, claimRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
}

func options(opts ...container.Option) sbk8s.Options {
	return sbk8s.Options{Namespace: "default", Claim: sbk8s.Claim{Name: claimName, Root: claimRoot}, Container: opts}
}

func newBackend(t *testing.T, opts ...container.Option) *sbk8s.Backend {
	t.Helper()
	b, err := sbk8s.New(context.Background(), options(opts...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leftovers lists the pods a session still has.
func leftovers(cs *kubernetes.Clientset) func(t *testing.T, sessionID string) []string {
	return func(t *testing.T, sessionID string) []string {
		ps, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: container.LabelSession})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range ps.Items {
			if p.Annotations[container.LabelSession] == sessionID {
				out = append(out, "pod "+p.Name)
			}
		}
		// The node's mounts of the session's directories for its pods
		// (the kubelet's volume subpaths).
		mi, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(mi), "\n") {
			if strings.Contains(l, "sandbash-"+sessionID+"-") {
				out = append(out, "mount "+l)
			}
		}
		return out
	}
}

// noLeftovers fails the test if any pod this process made is still there
// when the test ends. Pods being deleted (the image probes, which nothing
// waits for) get a minute to go.
func noLeftovers(t *testing.T, cs *kubernetes.Clientset) {
	t.Cleanup(func() {
		var ps *corev1.PodList
		for range 60 {
			var err error
			ps, err = cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: container.LabelSession})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(ps.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }) {
				break
			}
			time.Sleep(time.Second)
		}
		for _, p := range ps.Items {
			if p.Annotations[container.LabelOwner] == container.Owner() {
				t.Errorf("pod left behind: %s (%s)", p.Name, p.Status.Phase)
			}
		}
	})
}

// installSeccomp installs sandbash's profile on the node for the test.
func installSeccomp(t *testing.T) {
	t.Helper()
	cleanup, err := testcluster.InstallSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
}

func TestConformance(t *testing.T) {
	cs := clientset(t)
	installSeccomp(t)
	localClaim(t, cs)
	noLeftovers(t, cs)
	// sandbash runs with no more than deploy/kubernetes/rbac.yaml grants.
	asRBACUser(t, cs, true)
	backendtest.Run(t, func(t *testing.T) backend.Backend { return newBackend(t) }, backendtest.Capabilities{
		Image:            testImage,
		BridgeGateway:    "10.88.64.1",
		GoImage:          "sandbash-test-go:latest",
		GitImage:         "sandbash-test-git:2",
		EnvImage:         "sandbash-test-env:2",
		Supervised:       true,
		SupervisorIsInit: true,
		StoredOutput:     storedOutput(cs),
		SuidBinds:        true,
		Leftovers:        leftovers(cs),
		Refuses: backendtest.Refusals{
			Caches:    []string{"caches are not supported on Kubernetes", "privileged", "without caches"},
			Overlay:   []string{"overlay workspaces are not supported on Kubernetes", "privileged", "workspace mounted directly"},
			Egress:    []string{"egress rules are not supported on Kubernetes", "network namespace", "network off or on"},
			Submounts: []string{"has a mount inside it", "what that mount covers", "unmount it"},
		},
		MemoryLimited: func(t *testing.T, bytes int64) backend.Backend {
			l := container.DefaultLimits()
			l.Memory = bytes
			return newBackend(t, container.WithLimits(l))
		},
	})
}

// storedOutput is what the node keeps of the output of a session's pods
// that exist now: their containers' logs, as the API serves them to
// anyone allowed pods/log.
func storedOutput(cs *kubernetes.Clientset) func(t *testing.T, sessionID string) string {
	return func(t *testing.T, sessionID string) string {
		ps, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: container.LabelSession})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		n := 0
		for _, p := range ps.Items {
			if p.Annotations[container.LabelSession] != sessionID || len(p.Status.ContainerStatuses) == 0 ||
				p.Status.ContainerStatuses[0].State.Waiting != nil {
				continue // no container started yet: no log
			}
			n++
			b, err := cs.CoreV1().Pods("default").GetLogs(p.Name, &corev1.PodLogOptions{Container: "call"}).DoRaw(context.Background())
			if err != nil {
				t.Fatalf("the log of pod %s: %v", p.Name, err)
			}
			out.Write(b)
		}
		if n == 0 {
			t.Fatalf("no pod of session %s to read the log of", sessionID)
		}
		return out.String()
	}
}

// TestImageGroupsRefused: where the node's runtime gives the call's user
// the groups the image's /etc/group lists (the test cluster's default
// runtime, plain runc on containerd 1.6, which serves pods with the
// network on), the supervisor refuses to start, saying why and what to
// do; no call runs with them. (With the network off, the cluster's
// sandbash-nonet runtime gives none: the suite's ImageGroupsDoNotEnter.)
func TestImageGroupsRefused(t *testing.T) {
	cs := clientset(t)
	installSeccomp(t)
	localClaim(t, cs)
	noLeftovers(t, cs)
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.Chown(ws, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	s, err := sandbash.Open(ctx, newBackend(t), sandbash.Config{Workspace: ws, Image: "sandbash-test-env:2", Network: backend.NetworkOn})
	if err == nil {
		defer s.Close()
		var r *sandbash.Result
		if r, err = s.Run(ctx, sandbash.Request{Command: "id"}); err == nil {
			t.Fatalf("a call ran with the image's groups: %q", r.Output)
		}
	}
	for _, w := range []string{"gives uid 4242 the supplementary groups 4242 4343", "from the image's /etc/group", "use an image whose /etc/group does not list uid 4242's user"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal %q does not say %q", err, w)
		}
	}
}

// TestSupervisorEnvironClean: a pod's container starts with the image's
// ENV merged in by the runtime (a pod spec cannot remove it); the call
// supervisor, whose environment a call cannot read (it is not dumpable),
// must not keep it. Seen from the node: no waiter of a warm pod of the
// env image has the image's variables.
func TestSupervisorEnvironClean(t *testing.T) {
	cs := clientset(t)
	installSeccomp(t)
	localClaim(t, cs)
	noLeftovers(t, cs)
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.Chown(ws, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	s, err := sandbash.Open(ctx, newBackend(t), sandbash.Config{Workspace: ws, Image: "sandbash-test-env:2"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.WaitWarm(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := container.SupervisorDir + "/waiter"
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := 0
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(string(cmd), waiter+"\x00") {
			continue
		}
		env, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
		if err != nil {
			continue
		}
		found++
		for _, kv := range strings.Split(string(env), "\x00") {
			if strings.HasPrefix(kv, "SANDBASH_IMAGE_CANARY=") || strings.HasPrefix(kv, "BASH_ENV=") || strings.HasPrefix(kv, "ENV=") {
				t.Errorf("a call supervisor (%s) has the image's %s", filepath.Dir(p), kv)
			}
		}
	}
	if found == 0 {
		t.Fatal("no call supervisor found on the node")
	}
}

// TestGC: gc removes the pods whose owner is gone, seen across nodes and
// pods: a sandbash process of this host that exited, and a sandbash that
// ran in a pod that no longer exists (whatever host it named); it keeps
// the pods of a live process, and of a sandbash in a live pod elsewhere.
func TestGC(t *testing.T) {
	cs := clientset(t)
	ctx := context.Background()
	pods := cs.CoreV1().Pods("default")
	self := owner.Self()
	f := strings.Split(self, "/")
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadProc := strings.Join([]string{f[0], f[1], f[2], f[3], strconv.Itoa(dead.Process.Pid), "1"}, "/")
	elsewhere := strings.Join([]string{"runner-pod-on-another-node", "boot", "pidns", f[3], "7", "1"}, "/")

	// A live "runner" pod (never scheduled: the test cluster has no
	// scheduler), which a sandbash elsewhere would run in.
	runner, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sandbash-test-runner"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: testImage}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	t.Cleanup(func() { _ = pods.Delete(ctx, runner.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}) })

	mk := func(name, own, ownerPod string) {
		ann := map[string]string{container.LabelSession: name, container.LabelOwner: own}
		if ownerPod != "" {
			ann["sandbash.owner-pod"] = ownerPod
		}
		_, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{container.LabelSession: name}, Annotations: ann},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "call", Image: testImage}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}) })
	}
	mk("sandbash-gc-dead-process", deadProc, "")
	mk("sandbash-gc-live-process", self, "")
	mk("sandbash-gc-gone-pod", elsewhere, "default/sandbash-gone-runner/0000")
	mk("sandbash-gc-replaced-pod", elsewhere, "default/sandbash-test-runner/not-its-uid")
	mk("sandbash-gc-live-pod", elsewhere, "default/sandbash-test-runner/"+string(runner.UID))

	c, err := sbk8s.Connect(ctx, sbk8s.Options{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	removed, err := c.GC(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := []string{"pod sandbash-gc-dead-process", "pod sandbash-gc-gone-pod", "pod sandbash-gc-replaced-pod"}
	if !slices.Equal(removed, want) {
		t.Errorf("gc removed %v, want %v", removed, want)
	}
	for _, name := range []string{"sandbash-gc-live-process", "sandbash-gc-live-pod"} {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("gc removed %s, whose owner lives: %v", name, err)
		}
	}
}

// asRBACUser makes sandbash's identity, for the rest of the test, the
// user sandbash-test with nothing but what deploy/kubernetes/rbac.yaml
// grants (bound to it instead of the service account); without the file
// (rbac false), nothing at all. It returns the user's name.
func asRBACUser(t *testing.T, cs *kubernetes.Clientset, rbac bool) string {
	t.Helper()
	ctx := context.Background()
	user := "sandbash-test"
	if !rbac {
		user = "sandbash-test-nobody"
	}
	if rbac {
		undo, err := testcluster.ApplyRBAC(ctx, cs, "default", "../../deploy/kubernetes/rbac.yaml", "sandbash",
			rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(undo)
	}
	path := os.Getenv("KUBECONFIG")
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	restricted := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, restricted); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", restricted)
	return user
}

// TestDoctorSaysWhatIsMissing: for an identity granted nothing, doctor's
// report names every permission the backend needs in the namespace and
// where to get them; with deploy/kubernetes/rbac.yaml bound, nothing is
// missing.
func TestDoctorSaysWhatIsMissing(t *testing.T) {
	cs := clientset(t)
	admin := os.Getenv("KUBECONFIG")
	ctx := context.Background()
	info := func() string {
		c, err := sbk8s.Connect(ctx, sbk8s.Options{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		i, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(i.Details, "\n")
	}
	asRBACUser(t, cs, false)
	got := info()
	for _, w := range []string{"MISSING create pods, get pods, list pods, watch pods, delete pods, create pods/attach, create pods/exec, get persistentvolumeclaims (apply the Role and RoleBinding of deploy/kubernetes/rbac.yaml)",
		"MISSING get runtimeclasses, get nodes, get persistentvolumes"} {
		if !strings.Contains(got, w) {
			t.Errorf("doctor for an identity granted nothing:\n%s\nwant it to say %q", got, w)
		}
	}
	t.Setenv("KUBECONFIG", admin)
	asRBACUser(t, cs, true)
	if got := info(); strings.Contains(got, "MISSING") {
		t.Errorf("doctor with rbac.yaml bound:\n%s\nwant nothing missing", got)
	}
}

// TestOneShotLeavesNoPod: a session that keeps no pod warm (a one-shot
// CLI run) leaves neither its call's pod (Kubernetes keeps a finished pod:
// no engine removes it by itself) nor the node's mounts for it once Close
// returned.
func TestOneShotLeavesNoPod(t *testing.T) {
	cs := clientset(t)
	installSeccomp(t)
	localClaim(t, cs)
	ctx := context.Background()
	ws := t.TempDir()
	if err := os.Chown(ws, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	s, err := sandbash.Open(ctx, newBackend(t, container.WithPoolSize(0)), sandbash.Config{Workspace: ws, Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Run(ctx, sandbash.Request{Command: "echo one"}); err != nil || r.Output != "one\n" {
		t.Fatalf("the call: %v, %+v", err, r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(cs)(t, s.ID()); len(left) > 0 {
		t.Errorf("after Close, the one-shot session still has %v", left)
	}
}

// TestScale32x10: 32 sessions of 10 calls each at once on the single
// node, through one backend: every call succeeds with its own output, and
// once the sessions closed, no pod and no node mount of theirs is left.
func TestScale32x10(t *testing.T) {
	cs := clientset(t)
	installSeccomp(t)
	localClaim(t, cs)
	noLeftovers(t, cs)
	asRBACUser(t, cs, true)
	ctx := context.Background()
	b := newBackend(t)
	const sessions, calls = 32, 10
	ids := make([]string, sessions)
	errs := make(chan error, sessions)
	for i := range sessions {
		go func() {
			errs <- func() error {
				ws := filepath.Join(t.TempDir(), "ws")
				if err := os.Mkdir(ws, 0o755); err != nil {
					return err
				}
				if err := os.Chown(ws, 4242, 4242); err != nil {
					return err
				}
				s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: ws, Image: testImage})
				if err != nil {
					return err
				}
				ids[i] = s.ID()
				defer s.Close()
				for j := range calls {
					want := fmt.Sprintf("%d.%d\n", i, j)
					r, err := s.Run(ctx, sandbash.Request{Command: "echo " + strings.TrimSpace(want)})
					if err != nil {
						return fmt.Errorf("session %d call %d: %w", i, j, err)
					}
					if r.ExitCode != 0 || r.Output != want {
						return fmt.Errorf("session %d call %d: exit %d, output %q", i, j, r.ExitCode, r.Output)
					}
				}
				return s.Close()
			}()
		}()
	}
	failed := 0
	for range sessions {
		if err := <-errs; err != nil {
			failed++
			t.Error(err)
		}
	}
	for _, id := range ids {
		if id == "" {
			continue
		}
		if left := leftovers(cs)(t, id); len(left) > 0 {
			t.Errorf("session %s left %v", id, left)
		}
	}
	t.Logf("%d of %d sessions x %d calls succeeded", sessions-failed, sessions, calls)
}
