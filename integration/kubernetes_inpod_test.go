package integration

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/kubernetes/testcluster"
)

// TestKubernetesInPod is the CI fleet's case: sandbash runs in a runner
// pod whose workspace is a PersistentVolumeClaim, as a service account
// bound to nothing but deploy/kubernetes/rbac.yaml, and finds the cluster
// (in-cluster configuration), its own pod (POD_NAME from the downward
// API: the runner shares the node's network, so its hostname is the
// node's) and the claim behind its workspace from its pod's spec, with no
// --claim and with --claim ROOT. Its calls run in pods that mount the same
// claim at the same paths: what one call writes, the next one and the
// node see. A workspace that is on no claim is refused. doctor, in the
// pod, reports the in-cluster context, the permissions and the claim.
func TestKubernetesInPod(t *testing.T) {
	cs, err := testcluster.Clientset()
	if err != nil {
		backendtest.Unavailable(t, "kubernetes", err)
	}
	ctx := context.Background()
	if _, err := testcluster.InstallSeccomp(); err != nil {
		t.Fatal(err)
	}
	const name, owner = "sandbash-inpod", 4242

	// sandbash, static, for the test image (busybox and bash, no libc).
	binDir := tempDir(t, "sbinpod-bin-")
	build := exec.Command("go", "build", "-tags", "sandbash_kubernetes", "-o", filepath.Join(binDir, "sandbash"), "../cmd/sandbash")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a static sandbash: %v\n%s", err, out)
	}

	// The claim: the runner's workspace and sandbash's state are on it.
	root := tempDir(t, "sbinpod-claim-")
	for _, d := range []string{"ws", "state"} {
		p := filepath.Join(root, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	unclaim, err := testcluster.LocalClaim(ctx, cs, "default", name, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unclaim)

	// The runner's identity: a service account with rbac.yaml bound.
	sas := cs.CoreV1().ServiceAccounts("default")
	_ = sas.Delete(ctx, name, metav1.DeleteOptions{})
	if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sas.Delete(ctx, name, metav1.DeleteOptions{}) })
	unbind, err := testcluster.ApplyRBAC(ctx, cs, "default", "../deploy/kubernetes/rbac.yaml", name,
		rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unbind)

	// The in-cluster configuration: the service account's token, the
	// cluster's CA and the apiserver's address, which the test cluster
	// serves on the node's loopback (it runs no kube-proxy, so no service
	// address leads there).
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	ca := rc.CAData
	if len(ca) == 0 {
		if ca, err = os.ReadFile(rc.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(rc.Host)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	cms := cs.CoreV1().ConfigMaps("default")
	_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"ca.crt": string(ca)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(ctx, name, metav1.DeleteOptions{}) })

	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want the single node of scripts/k8s.sh: %v", err)
	}
	// Everything goes to stdout (2>&1): the node logs a container's
	// stdout and stderr apart, and their lines can come out of order (a
	// refusal printed after "== end"), while sandbash's own stderr must
	// fall in its section, where anything unwanted fails the test.
	script := `
exec 2>&1
sb="/sb/sandbash"; k="--backend kubernetes --image sandbash-test:latest"
cd /claim/ws
echo "== found"; $sb run $k -- 'id -u; pwd; echo call > made; cat /etc/hostname'; echo "exit $?"
echo "== root"; $sb run $k --claim /claim -- 'cat made'; echo "exit $?"
echo "== session"; id=$($sb session open $k) && $sb run --session "$id" -- 'echo one > /tmp/s' && $sb run --session "$id" -- 'cat /tmp/s' && $sb session close "$id"; echo "exit $?"
echo "== doctor"; $sb doctor 2>&1 | grep -A8 '^kubernetes:'
echo "== outside"; $sb run $k --workspace /sb -- 'echo ran'; echo "exit $?"
echo "== end"
`
	uid := int64(owner)
	yes, no := true, false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                     nodes.Items[0].Name, // the test cluster runs no scheduler
			HostNetwork:                  true,
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           name,
			AutomountServiceAccountToken: &no, // mounted below: the test cluster has no ServiceAccount admission
			SecurityContext:              &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &uid, RunAsNonRoot: &yes},
			Containers: []corev1.Container{{
				Name:            "runner",
				Image:           "sandbash-test:latest",
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"bash", "-c", script},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "KUBERNETES_SERVICE_HOST", Value: host},
					{Name: "KUBERNETES_SERVICE_PORT", Value: port},
					{Name: "XDG_STATE_HOME", Value: "/claim/state"},
					{Name: "HOME", Value: "/claim/state"},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "claim", MountPath: "/claim"},
					{Name: "sb", MountPath: "/sb", ReadOnly: true},
					{Name: "sa", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}},
				{Name: "sb", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: binDir}}},
				{Name: "sa", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}},
					{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
				}}}},
			},
		},
	}
	pods := cs.CoreV1().Pods("default")
	zero := int64(0)
	_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	waitGone(t, cs, name)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		waitGone(t, cs, name)
	})
	phase := corev1.PodPending
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if phase = p.Status.Phase; phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			break
		}
	}
	logs, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("the runner's log: %v (phase %s)", err, phase)
	}
	out := string(logs)
	t.Logf("the runner pod printed:\n%s", out)
	if !strings.Contains(out, "== end") {
		t.Fatalf("the runner did not finish (phase %s)", phase)
	}
	section := func(s string) string {
		_, after, _ := strings.Cut(out, "== "+s+"\n")
		body, _, _ := strings.Cut(after, "\n== ")
		return body + "\n"
	}
	if got, want := section("found"), "4242\n/claim/ws\nsandbash\nexit 0\n"; got != want {
		t.Errorf("a run with the claim found from the workspace's path printed %q, want %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(root, "ws", "made")); err != nil || string(b) != "call\n" {
		t.Errorf("the call's file on the node: %q, %v; want the call's write in the claim", b, err)
	}
	if got, want := section("root"), "call\nexit 0\n"; got != want {
		t.Errorf("a run with --claim ROOT printed %q, want %q", got, want)
	}
	if got, want := section("session"), "one\nexit 0\n"; got != want {
		t.Errorf("a CLI session in the pod printed %q, want %q", got, want)
	}
	for _, w := range []string{"kubernetes: available", "context in-cluster", "namespace default", "granted", "workspace claim: " + name + ", seen at /claim; node: " + nodes.Items[0].Name + "; output through a FIFO on the claim: true"} {
		if !strings.Contains(section("doctor"), w) {
			t.Errorf("doctor in the pod does not say %q", w)
		}
	}
	if s := section("outside"); !strings.Contains(s, "exit 125") || strings.Contains(s, "ran") || !strings.Contains(s, "is not on a PersistentVolumeClaim that sandbash's pod "+name+" mounts") {
		t.Errorf("a workspace on no claim: %q; want exit 125, nothing run, and why", s)
	}
	// Every call pod is gone; only the runner mounts the claim.
	ps, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps.Items {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name && p.Name != name {
				t.Errorf("call pod left: %s (%s)", p.Name, p.Status.Phase)
			}
		}
	}
}

// tempDir makes a directory that other users (a pod's) can traverse, and
// removes it after the test.
func tempDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// waitGone waits until pod name is gone from namespace default.
func waitGone(t *testing.T, cs k8sclient.Interface, name string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if _, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			return
		}
	}
	t.Errorf("pod %s is still there 2 minutes after its deletion", name)
}
