package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/kubernetes"
)

// kubernetesBackend is --backend kubernetes: the cluster found as kubectl
// finds it (KUBECONFIG, ~/.kube/config's current context, in-cluster),
// --namespace, --claim NAME:ROOT (or ROOT in a pod), --runtime as the
// RuntimeClass of pods with the network on. SANDBASH_K8S_CONTEXT,
// SANDBASH_K8S_NODE and SANDBASH_K8S_NONET_RUNTIME_CLASS set the rest, and
// SANDBASH_K8S_NAMESPACE and SANDBASH_K8S_CLAIM stand in for the flags.
// auto never picks it.
var kubernetesBackend = namedBackend{
	name: "kubernetes",
	open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
		ns := o.namespace
		if ns == "" {
			ns = os.Getenv("SANDBASH_K8S_NAMESPACE")
		}
		cl := o.claim
		if cl == "" {
			cl = os.Getenv("SANDBASH_K8S_CLAIM")
		}
		claim, err := parseClaim(cl)
		if err != nil {
			return nil, err
		}
		return kubernetes.New(ctx, kubernetes.Options{
			Namespace:             ns,
			Context:               os.Getenv("SANDBASH_K8S_CONTEXT"),
			Claim:                 claim,
			Node:                  os.Getenv("SANDBASH_K8S_NODE"),
			RuntimeClass:          o.runtime,
			NoNetworkRuntimeClass: os.Getenv("SANDBASH_K8S_NONET_RUNTIME_CLASS"),
			Container:             o.options(),
		})
	},
}

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
