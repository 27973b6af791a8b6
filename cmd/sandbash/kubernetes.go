package main

import (
	"context"
	"os"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/kubernetes"
)

// kubernetesBackend is --backend kubernetes. Its own settings come from
// the environment for now (flags to follow): SANDBASH_K8S_NAMESPACE,
// SANDBASH_K8S_CONTEXT, SANDBASH_K8S_CLAIM and SANDBASH_K8S_CLAIM_ROOT (the
// workspace's claim and where sandbash sees its root), SANDBASH_K8S_NODE,
// SANDBASH_K8S_NONET_RUNTIME_CLASS; the cluster is found as kubectl finds
// it. auto never picks it.
var kubernetesBackend = namedBackend{
	name: "kubernetes",
	open: func(ctx context.Context, o containerOptions) (backend.Backend, error) {
		return kubernetes.New(ctx, kubernetes.Options{
			Namespace:             os.Getenv("SANDBASH_K8S_NAMESPACE"),
			Context:               os.Getenv("SANDBASH_K8S_CONTEXT"),
			Claim:                 kubernetes.Claim{Name: os.Getenv("SANDBASH_K8S_CLAIM"), Root: os.Getenv("SANDBASH_K8S_CLAIM_ROOT")},
			Node:                  os.Getenv("SANDBASH_K8S_NODE"),
			NoNetworkRuntimeClass: os.Getenv("SANDBASH_K8S_NONET_RUNTIME_CLASS"),
			Container:             o.options(),
		})
	},
}
