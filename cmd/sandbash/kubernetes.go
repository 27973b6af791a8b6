//go:build sandbash_kubernetes

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/kubernetes"
)

// kubernetesBackend is --backend kubernetes: the cluster found as kubectl
// finds it (KUBECONFIG, ~/.kube/config's current context, in-cluster),
// --namespace, --claim NAME:ROOT (or ROOT in a pod, or nothing in a pod
// that mounts the workspace's claim), --runtime as the
// RuntimeClass of pods with the network on. SANDBASH_K8S_CONTEXT,
// SANDBASH_K8S_NODE and SANDBASH_K8S_NONET_RUNTIME_CLASS set the rest, and
// SANDBASH_K8S_NAMESPACE and SANDBASH_K8S_CLAIM stand in for the flags.
// auto never picks it.
var kubernetesBackend = namedBackend{
	name: "kubernetes",
	open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
		ko, err := kubernetesOptions(o.namespace, o.claim, o.workspace)
		if err != nil {
			return nil, err
		}
		ko.RuntimeClass = o.runtime
		ko.Container = o.options()
		return kubernetes.New(ctx, ko)
	},
}

// kubernetesOptions are the backend's options from --namespace, --claim
// and the environment.
func kubernetesOptions(namespace, claim, workspace string) (kubernetes.Options, error) {
	quietKlog()
	if namespace == "" {
		namespace = os.Getenv("SANDBASH_K8S_NAMESPACE")
	}
	if claim == "" {
		claim = os.Getenv("SANDBASH_K8S_CLAIM")
	}
	cl, err := parseClaim(claim)
	if err != nil {
		return kubernetes.Options{}, err
	}
	return kubernetes.Options{
		Namespace:             namespace,
		Context:               os.Getenv("SANDBASH_K8S_CONTEXT"),
		Claim:                 cl,
		Workspace:             workspace,
		Node:                  os.Getenv("SANDBASH_K8S_NODE"),
		NoNetworkRuntimeClass: os.Getenv("SANDBASH_K8S_NONET_RUNTIME_CLASS"),
	}, nil
}

// quietKlog keeps client-go's log off stderr, which is the user's: it logs
// what it cannot hand back (a stdin copy that ended on a closed stream at a
// call's end; a response body cut off by a request's deadline on a slow
// cluster), and sandbash reports the errors that matter itself. klog's own output settings are
// not enough: it writes errors to stderr whatever they say
// (-stderrthreshold); a logger of its own takes every message instead.
func quietKlog() {
	klog.SetLogger(logr.Discard())
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
}

// kubernetesDoctor is doctor's line for the cluster: which one, which
// namespace, what is missing (kubernetes.Cluster.Info).
func kubernetesDoctor(ctx context.Context, namespace, claim, workspace string) (string, bool) {
	o, err := kubernetesOptions(namespace, claim, workspace)
	if err != nil {
		return err.Error(), false
	}
	c, err := kubernetes.Connect(ctx, o)
	if err != nil {
		return err.Error(), false
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err.Error(), false
	}
	var line strings.Builder
	line.WriteString(info.Summary)
	ok := true
	for _, d := range info.Details {
		line.WriteString("\n        " + d)
		if strings.Contains(d, "MISSING") || strings.Contains(d, "NOT USABLE") {
			ok = false
		}
	}
	return line.String(), ok
}

// kubernetesGC removes the pods of dead sandbash processes and pods in
// the namespace (kubernetes.Cluster.GC); nothing when no cluster is
// configured.
func kubernetesGC(ctx context.Context, namespace string, all bool) ([]string, error) {
	o, err := kubernetesOptions(namespace, "", "")
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.Connect(ctx, o)
	if err != nil {
		if errors.Is(err, backend.ErrUnavailable) {
			return nil, nil
		}
		return nil, err
	}
	return c.GC(ctx, all)
}

// kubernetesHints are flagHints' entries for the backend's refusals.
var kubernetesHints = []flagHint{
	{kubernetes.ErrClaim, "give --claim NAME:ROOT, ROOT being where sandbash sees the claim's root; in a pod, --claim ROOT where the pod mounts the claim, or nothing when the workspace is on a claim the pod mounts"},
	{kubernetes.ErrNoNetworkClass, "name it with SANDBASH_K8S_NONET_RUNTIME_CLASS"},
}

// handToKubernetesBuild does nothing: this is the build with Kubernetes.
func handToKubernetesBuild() error { return nil }

// The mark of a hand-off is sandbash's own, not its calls' or helpers'.
func init() { os.Unsetenv(handOffEnv) }

// parseClaim parses --claim: NAME:ROOT, or ROOT alone (an absolute path).
func parseClaim(s string) (kubernetes.Claim, error) {
	if s == "" {
		return kubernetes.Claim{}, nil
	}
	if strings.HasPrefix(s, "/") {
		return kubernetes.Claim{Root: filepath.Clean(s)}, nil
	}
	name, root, ok := strings.Cut(s, ":")
	if !ok || name == "" || !filepath.IsAbs(root) {
		return kubernetes.Claim{}, fmt.Errorf("--claim %q: give NAME:ROOT (the claim's name, and the absolute path where sandbash sees its root), or ROOT alone in a pod that mounts the claim there", s)
	}
	return kubernetes.Claim{Name: name, Root: filepath.Clean(root)}, nil
}
