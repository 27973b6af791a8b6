// Package kubernetes runs sandbash calls in Kubernetes pods, over the API
// (k8s.io/client-go), finding the cluster as kubectl does: KUBECONFIG,
// else ~/.kube/config and its current context, else the in-cluster
// configuration when sandbash runs in a pod.
//
// Every call gets a fresh pod of one container that runs exactly that call
// and is deleted after it; each session keeps a small pool of pods started
// ahead of time, whose supervisor waits for its one command on stdin
// through an attach stream (package internal/ctrbackend: the same
// supervisor, handover and in-band trailer as on Docker and Podman).
//
// Pods meet the restricted Pod Security Standard: non-root (the workspace
// owner's uid:gid), every capability dropped, no privilege escalation,
// sandbash's own seccomp profile (see [SeccompProfile]), a read-only root filesystem, no service-account
// token, no host namespaces, no hostPath; memory and CPU requests and
// limits from the session's limits, nofile, nproc and fsize as rlimits the
// supervisor sets. Limits.Pids is not applied: a pod spec cannot set a
// process limit, and the node's (the kubelet's podPidsLimit) holds
// instead; the CLI refuses --pids here. Signals go in through exec (the API cannot signal a
// container).
//
// The workspace is a PersistentVolumeClaim (see [Claim]): every host path
// a session mounts must be on it, and pods mount it by subPath at the same
// paths. Caches and egress rules are refused. The network is off unless
// the session turns it on; "off" is a RuntimeClass whose runtime gives the
// pod's container no network (see [WithNoNetworkRuntimeClass]).
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/moby/sys/mountinfo"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/owner"
)

var (
	_ backend.Backend   = (*Backend)(nil)
	_ backend.Collector = (*Backend)(nil)
	_ backend.Informer  = (*Backend)(nil)
	_ backend.Unstaged  = (*Backend)(nil)
)

// Claim is the PersistentVolumeClaim that holds the workspace: Name is the
// claim's, Root the path at which sandbash sees the claim's root (where it
// is mounted in sandbash's own pod, or, for a local volume, its directory
// on the node). Every host path a session mounts (the workspace, readable
// and writable paths, the session's /tmp and HOME) must be under Root.
type Claim struct{ Name, Root string }

// ErrClaim is wrapped by the refusals of the workspace's claim: none
// given or found, or one the workspace is not on.
var ErrClaim = errors.New("no usable workspace claim")

// ErrNoNetworkClass is wrapped when the RuntimeClass without network is
// missing.
var ErrNoNetworkClass = errors.New("no RuntimeClass without network")

// DefaultNoNetworkRuntimeClass is the RuntimeClass pods without network run
// under unless WithNoNetworkRuntimeClass names another.
const DefaultNoNetworkRuntimeClass = "sandbash-nonet"

// Options are the backend's own settings, beyond the container ones.
type Options struct {
	// Namespace overrides the kubeconfig context's namespace.
	Namespace string
	// Context overrides the kubeconfig's current context.
	Context string
	// Claim is the workspace's claim. With Name "", sandbash finds it in
	// its own pod's spec: the claim the pod mounts at Root, or, with Root
	// "" too, the claim mounted at the deepest path that holds Workspace.
	// Outside a pod, Name is needed.
	Claim Claim
	// Workspace is the workspace's path, with which sandbash finds its
	// claim when Claim is not given.
	Workspace string
	// Node binds every pod to a node (spec.nodeName); "" binds them to
	// sandbash's own node when it runs in a pod, else to the node of the
	// claim's local volume, else leaves them to the scheduler.
	Node string
	// RuntimeClass is the RuntimeClass of pods with the network on
	// (--runtime); "" the cluster's default.
	RuntimeClass string
	// NoNetworkRuntimeClass is the RuntimeClass of pods without network;
	// "" is DefaultNoNetworkRuntimeClass.
	NoNetworkRuntimeClass string
	// Container are the container backends' options (limits, pool size).
	Container []shared.Option
}

// Backend is the Kubernetes backend: the container lifecycle of package
// internal/ctrbackend on pods.
type Backend struct {
	*shared.Backend
	c *Cluster
	e *engine
}

// Cluster is a connection to a cluster and namespace, without a session's
// claim: what `sandbash doctor` and `sandbash gc` need.
type Cluster struct {
	e       *engine
	context string
	server  string
	opts    Options
	settled bool // the engine's claim is settled (New)
}

// Connect finds the cluster as kubectl does and checks that it answers. It
// fails with an error wrapping backend.ErrUnavailable when there is no
// configuration or the cluster does not answer.
func Connect(ctx context.Context, o Options) (*Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: no cluster configuration (%v): set KUBECONFIG or write ~/.kube/config, or run sandbash in a pod: %w", err, backend.ErrUnavailable)
	}
	ns := o.Namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil || ns == "" {
			ns = "default"
		}
	}
	raw, _ := cc.RawConfig()
	kctx := raw.CurrentContext
	if o.Context != "" {
		kctx = o.Context
	}
	if kctx == "" {
		kctx = "in-cluster"
	}
	rc.QPS, rc.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %v: %w", err, backend.ErrUnavailable)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		return nil, fmt.Errorf("kubernetes: cannot reach the cluster at %s (context %s): %v; check KUBECONFIG and the context: %w", rc.Host, kctx, err, backend.ErrUnavailable)
	}
	e := &engine{cfg: rc, cs: cs, namespace: ns, claim: o.Claim, workspace: o.Workspace, node: o.Node, runtime: o.RuntimeClass, noNet: o.NoNetworkRuntimeClass}
	if e.noNet == "" {
		e.noNet = DefaultNoNetworkRuntimeClass
	}
	return &Cluster{e: e, context: kctx, server: rc.Host, opts: o}, nil
}

// New connects to the cluster and checks that the claim and the
// RuntimeClass without network exist. It fails with an error wrapping
// backend.ErrUnavailable when the cluster does not answer.
func New(ctx context.Context, o Options) (*Backend, error) {
	cfg, err := shared.NewConfig(o.Container...)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	c, err := Connect(ctx, o)
	if err != nil {
		return nil, err
	}
	e := c.e
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.findClaim(pctx); err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	// A RuntimeClass is cluster-wide: an identity allowed only its
	// namespace may not read it, and then the pods' creation says.
	if _, err := e.cs.NodeV1().RuntimeClasses().Get(pctx, e.noNet, metav1.GetOptions{}); err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("kubernetes: the RuntimeClass %q, which gives pods without network no network, is not usable (%v): a plain CNI enforces no NetworkPolicy, so sandbash runs networkless calls under a runtime that gives the pod none (gVisor with its network set to none, or the runc wrapper of scripts/k8s.sh); install one and name it as the RuntimeClass without network: %w: %w",
			e.noNet, err, ErrNoNetworkClass, backend.ErrUnavailable)
	}
	c.settled = true
	return &Backend{Backend: shared.NewBackend(e, cfg), c: c, e: e}, nil
}

// self returns sandbash's own pod when it runs in one (the hostname is the
// pod's name), or nil.
func (e *engine) self(ctx context.Context) (*podInfo, error) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	p, err := e.cs.CoreV1().Pods(e.namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("finding sandbash's own pod %s/%s (set POD_NAME from the downward API if the hostname is not the pod's name): %w", e.namespace, name, err)
	}
	return &podInfo{node: p.Spec.NodeName, claims: claimMounts(p), pod: p}, nil
}

// claimMounts maps the paths at which pod p's containers mount a
// PersistentVolumeClaim whole (not a subPath of it) to the claim;
// ambiguousClaim where the containers mount something else there too (a
// different claim, a subPath, another kind of volume): the spec does not
// say which container is sandbash's.
func claimMounts(p *corev1.Pod) map[string]string {
	vols := map[string]string{}
	for _, v := range p.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			vols[v.Name] = v.PersistentVolumeClaim.ClaimName
		}
	}
	sources := map[string]map[string]bool{} // mount path -> volume|subPath
	for _, c := range p.Spec.Containers {
		for _, m := range c.VolumeMounts {
			mp := filepath.Clean(m.MountPath)
			if sources[mp] == nil {
				sources[mp] = map[string]bool{}
			}
			sources[mp][m.Name+"|"+m.SubPath] = true
		}
	}
	claims := map[string]string{}
	for mp, srcs := range sources {
		whole := ""
		for src := range srcs {
			name, sub, _ := strings.Cut(src, "|")
			if cl, ok := vols[name]; ok && sub == "" {
				whole = cl
			}
		}
		switch {
		case whole == "":
		case len(srcs) > 1:
			claims[mp] = ambiguousClaim
		default:
			claims[mp] = whole
		}
	}
	return claims
}

// ambiguousClaim stands, in podInfo.claims, for a mount path at which the
// pod's containers mount different claims.
const ambiguousClaim = "\x00"

type podInfo struct {
	node   string
	claims map[string]string // mount path -> claim
	pod    *corev1.Pod
}

// findClaim settles the claim, and the node pods go to.
func (e *engine) findClaim(ctx context.Context) error {
	me, err := e.self(ctx)
	if err != nil {
		return err
	}
	if me != nil && e.node == "" {
		e.node = me.node
	}
	if me != nil {
		e.ownerPod = me.pod
	}
	if e.claim.Name == "" {
		if me == nil {
			return fmt.Errorf("no workspace claim: pods see the workspace only through a PersistentVolumeClaim; name the claim and the path at which sandbash sees its root, or run sandbash in a pod that mounts the workspace's claim: %w: %w", ErrClaim, backend.ErrSetup)
		}
		if e.claim.Root == "" {
			e.claim.Root = deepestMount(me.claims, e.workspace)
			if e.claim.Root == "" {
				return fmt.Errorf("the workspace %s is not on a PersistentVolumeClaim that sandbash's pod %s mounts (it mounts %s): pods see the workspace only through a claim; put the workspace on the claim the pod mounts, or name the claim and where sandbash sees its root: %w: %w",
					e.workspace, me.pod.Name, mountList(me.claims), ErrClaim, backend.ErrSetup)
			}
		}
		e.claim.Name = me.claims[filepath.Clean(e.claim.Root)]
		if e.claim.Name == ambiguousClaim {
			return fmt.Errorf("the containers of sandbash's pod %s mount different volumes at %s, and the spec does not say which container is sandbash's: name the claim: %w: %w", me.pod.Name, e.claim.Root, ErrClaim, backend.ErrSetup)
		}
		if e.claim.Name != "" && !isMountPoint(e.claim.Root) {
			return fmt.Errorf("the pod %s mounts the claim %s at %s, but not in sandbash's own container, where %s is no mount: name the claim: %w: %w", me.pod.Name, e.claim.Name, e.claim.Root, e.claim.Root, ErrClaim, backend.ErrSetup)
		}
		if e.claim.Name == "" {
			return fmt.Errorf("%s is not where sandbash's pod mounts a PersistentVolumeClaim (it mounts %s): the workspace must be on a claim that the call pods can mount; name the claim, or the path where the pod mounts it: %w: %w", e.claim.Root, mountList(me.claims), ErrClaim, backend.ErrSetup)
		}
	}
	if e.claim.Root == "" || !filepath.IsAbs(e.claim.Root) {
		return fmt.Errorf("the claim %s needs the absolute path at which sandbash sees its root: %w: %w", e.claim.Name, ErrClaim, backend.ErrSetup)
	}
	pvc, err := e.cs.CoreV1().PersistentVolumeClaims(e.namespace).Get(ctx, e.claim.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the workspace claim %s/%s: %w: %w", e.namespace, e.claim.Name, err, ErrClaim)
	}
	if e.node == "" && pvc.Spec.VolumeName != "" {
		// A local volume is on one node: pods go there.
		if pv, err := e.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{}); err == nil && pv.Spec.NodeAffinity != nil && pv.Spec.NodeAffinity.Required != nil {
			for _, t := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
				for _, r := range t.MatchExpressions {
					if r.Key == "kubernetes.io/hostname" && len(r.Values) == 1 && len(t.MatchExpressions) == 1 {
						e.node = r.Values[0]
					}
				}
			}
		}
	}
	e.nodeFacts(ctx, me)
	return nil
}

// deepestMount returns the mount path in claims (mount path -> claim) that
// holds path, the deepest if several do; "" if none does or path is "".
func deepestMount(claims map[string]string, path string) string {
	if path == "" {
		return ""
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return ""
	}
	// Where the workspace really is: a symlink on the claim may lead
	// onto another mount (and noSubmounts refuses a mount between the
	// claim's root and a path).
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	best := ""
	for mp := range claims {
		rel, err := filepath.Rel(filepath.Clean(mp), filepath.Clean(path))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			continue
		}
		if len(filepath.Clean(mp)) > len(best) {
			best = filepath.Clean(mp)
		}
	}
	return best
}

// isMountPoint reports whether path is a mount point of this process.
func isMountPoint(path string) bool {
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(filepath.Clean(path)))
	return err == nil && len(ms) > 0
}

// mountList says where a pod mounts claims, for errors.
func mountList(claims map[string]string) string {
	if len(claims) == 0 {
		return "no claim"
	}
	var l []string
	for mp, cl := range claims {
		if cl == ambiguousClaim {
			cl = "several claims"
		}
		l = append(l, cl+" at "+mp)
	}
	sort.Strings(l)
	return strings.Join(l, ", ")
}

// nodeFacts learns, where the API lets it read the pods' node, whether
// sandbash runs there (in a pod on it, or on the host whose address the
// node has) and whether its runtime honours supplementalGroupsPolicy
// Strict.
func (e *engine) nodeFacts(ctx context.Context, me *podInfo) {
	if e.node == "" {
		return
	}
	if me != nil {
		e.local = me.node == e.node
	}
	n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node, metav1.GetOptions{})
	if err != nil {
		return
	}
	if f := n.Status.Features; f != nil && f.SupplementalGroupsPolicy != nil {
		e.strictGroups = *f.SupplementalGroupsPolicy
	}
	if me != nil {
		return
	}
	mine := map[string]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
				mine[n.IP.String()] = true
			}
		}
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP && mine[a.Address] {
			e.local = true
		}
	}
}

// Name returns "kubernetes".
func (b *Backend) Name() string { return "kubernetes" }

// Unstaged says why nothing is staged: pods mount the claim, not host paths.
func (b *Backend) Unstaged() string {
	return "the calls run in Kubernetes pods, which mount the workspace claim " + b.e.claim.Name + " on their node, not what sandbash would stage in its own mount namespace"
}

// Close releases nothing: client-go's connections close with the process.
func (b *Backend) Close() error { return nil }

// Namespace is where the backend makes its pods.
func (b *Backend) Namespace() string { return b.e.namespace }

// Namespace is where the backend makes its pods.
func (c *Cluster) Namespace() string { return c.e.namespace }

// Needed are the permissions the backend uses in its namespace.
var Needed = []authv1.ResourceAttributes{
	{Resource: "pods", Verb: "create"}, {Resource: "pods", Verb: "get"}, {Resource: "pods", Verb: "list"},
	{Resource: "pods", Verb: "watch"}, {Resource: "pods", Verb: "delete"},
	{Resource: "pods", Subresource: "attach", Verb: "create"}, {Resource: "pods", Subresource: "exec", Verb: "create"},
	{Resource: "persistentvolumeclaims", Verb: "get"},
}

// Helpful are cluster-wide permissions the backend uses when it has them:
// reading the RuntimeClass without network (else the pods' creation
// fails if it is missing), the pods' node (whether sandbash runs there,
// whether its runtime honours supplementalGroupsPolicy Strict) and a
// claim's volume (to find the node of a local volume).
var Helpful = []authv1.ResourceAttributes{
	{Group: "node.k8s.io", Resource: "runtimeclasses", Verb: "get"},
	{Resource: "nodes", Verb: "get"},
	{Resource: "persistentvolumes", Verb: "get"},
}

// Missing asks the cluster (SelfSubjectAccessReview) which of attrs this
// identity lacks in the namespace, as "verb resource[/subresource]".
func (c *Cluster) Missing(ctx context.Context, attrs []authv1.ResourceAttributes) ([]string, error) {
	var missing []string
	for _, a := range attrs {
		if a.Resource != "runtimeclasses" && a.Resource != "nodes" && a.Resource != "persistentvolumes" {
			a.Namespace = c.e.namespace
		}
		r, err := c.e.cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a}}, metav1.CreateOptions{})
		if err != nil {
			return nil, err
		}
		if !r.Status.Allowed {
			res := a.Resource
			if a.Subresource != "" {
				res += "/" + a.Subresource
			}
			missing = append(missing, a.Verb+" "+res)
		}
	}
	return missing, nil
}

// Info says which cluster, namespace and claim, and which permissions are
// missing, for `sandbash doctor`.
func (b *Backend) Info(ctx context.Context) (backend.Info, error) { return b.c.Info(ctx) }

// Info says which cluster, context and namespace; which of the
// permissions the backend needs are missing (SelfSubjectAccessReview);
// whether the workspace claim, when one is given or sandbash runs in a
// pod, is usable; and whether the RuntimeClass without network exists.
func (c *Cluster) Info(ctx context.Context) (backend.Info, error) {
	e := c.e
	v, err := e.cs.Discovery().ServerVersion()
	if err != nil {
		return backend.Info{}, fmt.Errorf("kubernetes: %w", err)
	}
	perm := func(what string, attrs []authv1.ResourceAttributes, fix string) string {
		missing, err := c.Missing(ctx, attrs)
		switch {
		case err != nil:
			return what + ": could not be checked (SelfSubjectAccessReview: " + err.Error() + ")"
		case len(missing) > 0:
			return what + ": MISSING " + strings.Join(missing, ", ") + " (" + fix + ")"
		}
		return what + ": granted"
	}
	details := []string{
		perm("permissions in namespace "+e.namespace+" (pods, pods/attach, pods/exec, persistentvolumeclaims)", Needed, "apply the Role and RoleBinding of deploy/kubernetes/rbac.yaml"),
		perm("cluster-wide reads (runtimeclasses, nodes, persistentvolumes; optional)", Helpful, "apply the ClusterRole and ClusterRoleBinding of deploy/kubernetes/rbac.yaml, or do without: see there"),
	}
	if c.settled || c.opts.Claim != (Claim{}) || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		ce := e
		var err error
		if !c.settled {
			// A Backend's engine settled its claim in New, and its
			// sessions read it: only a bare Cluster looks it up here.
			err = ce.findClaim(ctx)
		}
		if err != nil {
			details = append(details, "workspace claim: NOT USABLE: "+err.Error())
		} else {
			node := ce.node
			if node == "" {
				node = "(the scheduler's choice)"
			}
			details = append(details, fmt.Sprintf("workspace claim: %s, seen at %s; node: %s; output through a FIFO on the claim: %v; image groups kept out by the node's runtime (supplementalGroupsPolicy Strict): %v", ce.claim.Name, ce.claim.Root, node, ce.local, ce.strictGroups))
		}
	} else {
		details = append(details, "workspace claim: none given (a session needs the claim that holds its workspace, and where sandbash sees the claim's root)")
	}
	switch _, err := e.cs.NodeV1().RuntimeClasses().Get(ctx, e.noNet, metav1.GetOptions{}); {
	case err == nil:
		details = append(details, "network off: RuntimeClass "+e.noNet)
	case apierrors.IsForbidden(err):
		details = append(details, "network off: RuntimeClass "+e.noNet+" (not allowed to check that it exists)")
	default:
		details = append(details, "network off: RuntimeClass "+e.noNet+" MISSING ("+err.Error()+"): calls without network cannot run; install a runtime that gives pods no network and a RuntimeClass for it")
	}
	sc, _, err := SeccompProfile()
	if err != nil {
		sc = "unavailable (" + err.Error() + ")"
	}
	details = append(details,
		"seccomp: Localhost profile "+sc+", which must be in the kubelet's seccomp directory on each node (<kubelet root>/seccomp/; kubernetes.SeccompProfile gives its bytes)",
		"process limit: the node's kubelet podPidsLimit (a pod spec cannot set one); caches, overlay workspaces and egress rules: not supported on this backend")
	return backend.Info{
		Summary: fmt.Sprintf("Kubernetes %s at %s, context %s, namespace %s", v.GitVersion, c.server, c.context, e.namespace),
		Details: details,
	}, nil
}

// WithLimits, WithPoolSize and WithProgress are the container options.
func WithLimits(l backend.Limits) shared.Option { return shared.WithLimits(l) }

// WithPoolSize sets how many warm pods a session keeps ready (default 1).
func WithPoolSize(n int) shared.Option { return shared.WithPoolSize(n) }

// WithProgress sets where progress goes.
func WithProgress(w io.Writer) shared.Option { return shared.WithProgress(w) }

// IsNotFound reports whether err is the API's not-found.
func IsNotFound(err error) bool {
	return apierrors.IsNotFound(errors.Unwrap(err)) || apierrors.IsNotFound(err)
}

// annOwnerPod names, on the pods of a sandbash that runs in a pod, that
// pod: namespace/name/uid.
const annOwnerPod = "sandbash.owner-pod"

// GC removes the pods sandbash made whose owner is gone: a sandbash that
// ran in a pod that no longer exists (or is another pod of the same name),
// seen from anywhere; else a sandbash process of this host, PID namespace
// and uid (any uid's with all) that has exited. The pods of a live pod's
// sandbash are left to that pod (and to the cluster's garbage collector,
// through their owner reference, once it goes).
func (b *Backend) GC(ctx context.Context, all bool) ([]string, error) { return b.c.GC(ctx, all) }

// GC: see [Backend.GC].
func (c *Cluster) GC(ctx context.Context, all bool) ([]string, error) {
	e := c.e
	ps, err := e.cs.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: shared.LabelSession})
	if err != nil {
		return nil, fmt.Errorf("kubernetes: listing sandbash pods in namespace %s: %w", e.namespace, err)
	}
	if e.ownerPod == nil {
		if me, err := e.self(ctx); err == nil && me != nil {
			e.ownerPod = me.pod
		}
	}
	var deleting, removed []string
	var errs []error
	for _, p := range ps.Items {
		own := p.Annotations[shared.LabelOwner]
		id, err := owner.Parse(own)
		if err != nil || !all && id.UID != os.Geteuid() {
			continue
		}
		gone := false
		if op := p.Annotations[annOwnerPod]; op != "" && (e.ownerPod == nil || op != ownerPodRef(e.ownerPod)) {
			f := strings.Split(op, "/")
			if len(f) != 3 {
				continue
			}
			o, err := e.cs.CoreV1().Pods(f[0]).Get(ctx, f[1], metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				gone = true
			case err != nil:
				errs = append(errs, fmt.Errorf("kubernetes: the owner of pod %s, pod %s/%s: %w", p.Name, f[0], f[1], err))
				continue
			default:
				gone = string(o.UID) != f[2]
			}
		} else {
			gone = owner.Gone(own)
		}
		if !gone {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		already, err := e.startRemove(rctx, p.Name)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("kubernetes: removing pod %s: %w", p.Name, err))
		case already:
			removed = append(removed, "pod "+p.Name)
		default:
			deleting = append(deleting, p.Name)
		}
	}
	// The node stops every pod asked for side by side; a busy node took
	// more than 30 s for one.
	wctx, cancel := context.WithTimeout(ctx, gcWait)
	defer cancel()
	for _, name := range deleting {
		if err := e.waitRemoved(wctx, name); err != nil {
			errs = append(errs, fmt.Errorf("kubernetes: removing pod %s: %w (gc again later: the node may still be stopping it)", name, err))
			continue
		}
		removed = append(removed, "pod "+name)
	}
	return removed, errors.Join(errs...)
}

// gcWait bounds how long GC waits for the pods it deleted to be gone.
const gcWait = 2 * time.Minute

func ownerPodRef(p *corev1.Pod) string { return p.Namespace + "/" + p.Name + "/" + string(p.UID) }
