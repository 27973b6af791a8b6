package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/kubernetes"
	"github.com/sandbash/sandbash/backend/kubernetes/testcluster"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// benchOwner owns the workspace when the bench runs as root.
const benchOwner = 4242

// kubeClaim is the claim of the bench's directory on the test cluster.
const kubeClaim = "sandbash-bench"

// kubeTarget is the cluster of scripts/k8s.sh (or KUBECONFIG's): a claim
// of the bench's directory and sandbash's seccomp profile on its node, as
// the cluster's admin would make them, and `kubectl run --rm` of the same
// image on the same node as the reference. Its rows: pod start (one-shot),
// the warm call and the concurrent sessions.
func (b *bench) kubeTarget(ctx context.Context, image string) (*target, error) {
	cs, err := testcluster.Clientset()
	if err != nil {
		return nil, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		return nil, fmt.Errorf("want the single node of scripts/k8s.sh: %v", err)
	}
	node := nodes.Items[0].Name
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		m, _ := filepath.Glob("/var/cache/sandbash-k8s/v*/kubectl")
		if len(m) == 0 {
			return nil, fmt.Errorf("no kubectl for the reference (scripts/k8s.sh build makes one)")
		}
		kubectl = m[len(m)-1]
	}
	// Calls never run as root, and nothing idmaps a root-owned workspace
	// for pods: the workspace belongs to a user, as a CI checkout would.
	if os.Geteuid() == 0 {
		if err := os.Chown(b.workspace, benchOwner, benchOwner); err != nil {
			return nil, err
		}
	}
	unseccomp, err := testcluster.InstallSeccomp()
	if err != nil {
		return nil, err
	}
	unclaim, err := testcluster.LocalClaim(ctx, cs, "default", kubeClaim, b.dir)
	if err != nil {
		unseccomp()
		return nil, err
	}
	overrides, _ := json.Marshal(map[string]any{"spec": map[string]any{"nodeName": node}})
	var n atomic.Int64
	return &target{
		name: "kubernetes", image: image,
		extraFlags: []string{"--claim", kubeClaim + ":" + b.dir},
		only:       []string{"one-shot", "warm", "concurrent"},
		open: func(ctx context.Context, pool int) (backend.Backend, error) {
			return kubernetes.New(ctx, kubernetes.Options{Namespace: "default", Claim: kubernetes.Claim{Name: kubeClaim, Root: b.dir},
				Container: []container.Option{container.WithPoolSize(pool)}})
		},
		ref: func(argv ...string) *exec.Cmd {
			name := fmt.Sprintf("sbbench-ref-%d", n.Add(1))
			return exec.Command(kubectl, append([]string{"run", name, "--rm", "-i", "--quiet", "--restart=Never", "--image", image,
				"--image-pull-policy=IfNotPresent", "--overrides", string(overrides), "--command", "--"}, argv...)...)
		},
		refName: "kubectl run --rm -i",
		left: func() []string {
			ps, err := cs.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: container.LabelSession})
			if err != nil {
				return []string{"listing pods: " + err.Error()}
			}
			var left []string
			for _, p := range ps.Items {
				left = append(left, "pod "+p.Name)
			}
			return left
		},
		close: func() { unclaim(); unseccomp() },
	}, nil
}
