package kubernetes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/moby/sys/mountinfo"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

// engine is the Kubernetes API under package internal/ctrbackend's
// lifecycle: a container is a pod of one container, bound to a node.
type engine struct {
	cfg       *rest.Config
	cs        kubernetes.Interface
	namespace string
	claim     Claim
	workspace string // the workspace's path, to find its claim (Options.Workspace)
	node      string // spec.nodeName of every pod; "" leaves it to the scheduler
	runtime   string // RuntimeClass of pods with the network on ("" the cluster's default)
	noNet     string // RuntimeClass of pods without network
	// local: sandbash shares the node (and its kernel) with the pods, so a
	// FIFO on the claim joins the two (see [shared.LocalEngine]).
	local bool
	// strictGroups: the node's runtime honours supplementalGroupsPolicy
	// Strict (no groups from the image's /etc/group).
	strictGroups bool
	// paths caches the PATH of each image (see Image).
	paths sync.Map
	// ownerPod is sandbash's own pod, when it runs in one: its pods name
	// it (annotation and owner reference), so that gc anywhere, and the
	// cluster's garbage collector, remove them once it is gone.
	ownerPod *corev1.Pod
}

var _ shared.SlowStarter = (*engine)(nil)

// StartTimeout: a pod may wait for a node with room, an image pull, or a
// node pool scaling up, and on a busy node for the kubelet (32 sessions
// starting pods at once on the 2-core test node took over 30 s).
func (e *engine) StartTimeout() time.Duration { return 3 * time.Minute }

func (e *engine) Name() string { return "kubernetes" }

// Local reports whether sandbash runs on the pods' node: only then does a
// FIFO on the claim carry a call's output (see [shared.LocalEngine]),
// which keeps it out of the container's log, where the node would keep a
// copy of everything a call writes to the attach stream.
func (e *engine) Local() bool { return e.local }

// Image cannot be asked of the API: images live on the nodes. The pod
// names the image with imagePullPolicy IfNotPresent, and a pod that
// cannot get it fails its start with the node's reason. What the API
// cannot say either is the image's PATH, which calls keep (its tools are
// where it says): a probe pod, once per image, writes it to its
// termination message. The rest of the image's environment is removed in
// every pod (see podTemplate).
func (e *engine) Image(ctx context.Context, ref string) (shared.Image, bool, error) {
	img := shared.Image{Ref: ref, ID: ref}
	if v, ok := e.paths.Load(ref); ok {
		img.Env = v.([]string)
		return img, true, nil
	}
	path, err := e.probePath(ctx, ref)
	if err != nil {
		return img, false, err
	}
	if path != "" {
		img.Env = []string{"PATH=" + path}
	}
	e.paths.Store(ref, img.Env)
	return img, true, nil
}

// probePath runs a pod of the image that writes its PATH to its
// termination message, and removes it.
func (e *engine) probePath(ctx context.Context, ref string) (string, error) {
	sum := sha256.Sum256([]byte(ref + "\x00" + shared.NewNonce()))
	name := "sandbash-probe-" + hex.EncodeToString(sum[:6])
	nobody := int64(65534)
	pod, err := e.hardened(name, nobody, nobody, e.noNet)
	if err != nil {
		return "", err
	}
	pod.Labels[labelManaged] = "true"
	for k, v := range shared.Labels(name) {
		pod.Annotations[k] = v
		if k == shared.LabelSession {
			pod.Labels[k] = labelValue(v)
		}
	}
	pod.Spec.Containers = []corev1.Container{{
		Name: "probe", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent,
		Command:                  escapeExpansion([]string{"bash", "-p", "-c", `printf '%s' "$PATH" > /dev/termination-log`}),
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext:          pod.Spec.Containers[0].SecurityContext,
		Resources:                corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
	}}
	pods := e.cs.CoreV1().Pods(e.namespace)
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("starting a pod of %s to learn its PATH: %w", ref, err)
	}
	defer func() {
		// The pod has ended: the node removes it, and nothing needs to
		// wait for that (a one-shot run would, a pod start's worth).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		grace := int64(1)
		_ = pods.Delete(rctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		p, err := pods.Get(pctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("a pod of %s, to learn its PATH: %w", ref, err)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				if t.ExitCode != 0 {
					return "", fmt.Errorf("a pod of %s, to learn its PATH, failed (%s, exit %d: %s): the image needs bash: %w", ref, t.Reason, t.ExitCode, t.Message, backend.ErrSetup)
				}
				return t.Message, nil
			}
			if w := cs.State.Waiting; w != nil && badWaiting[w.Reason] {
				return "", fmt.Errorf("a pod of %s cannot start: %s: %s; the node must hold the image or be able to pull it: %w", ref, w.Reason, w.Message, backend.ErrSetup)
			}
		}
		select {
		case <-pctx.Done():
			return "", fmt.Errorf("a pod of %s, to learn its PATH, did not end: %w", ref, pctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *engine) Pull(ctx context.Context, ref string, progress io.Writer) error {
	return errors.New("the nodes pull images themselves")
}

// waitFirst is what a pod's container runs before the supervisor: it
// waits for one line on stdin, which Run writes once it is attached, so
// that nothing the supervisor writes (its ready line) is written before
// anyone reads it. (An attach sees only what is written after it.)
const waitFirst = `IFS= read -r _ || exit 0
`

// Template refuses what pods cannot do as the other backends do, and
// computes the pod every call of the session runs in.
func (e *engine) Template(spec *shared.Spec) (shared.CreateFunc, error) {
	for _, v := range spec.Volumes {
		if v.Overlay.Workspace {
			return nil, fmt.Errorf("reviewable overlay workspaces are not supported on Kubernetes: the session's layer over the workspace is an overlay mount, which a pod gets only from a privileged container or a host mount, and sandbash's pods are unprivileged and get no hostPath; open the session with the workspace mounted directly: %w", backend.ErrUnavailable)
		}
	}
	if len(spec.Volumes) > 0 {
		return nil, fmt.Errorf("caches are not supported on Kubernetes: a cache is a copy-on-write overlay mount, which a pod gets only from a privileged container or a host mount, and sandbash's pods are unprivileged and get no hostPath; open the session without caches: %w", backend.ErrUnavailable)
	}
	if spec.Network == backend.NetworkProxy {
		return nil, fmt.Errorf("egress rules are not supported on Kubernetes: sandbash makes each sandbox's egress proxy listener inside the sandbox's network namespace, from the host, which a pod on a node does not allow; open the session with the network off or on: %w", backend.ErrUnavailable)
	}
	if spec.Network != backend.NetworkOn && e.runtime != "" && e.runtime != e.noNet {
		return nil, fmt.Errorf("the RuntimeClass %s serves calls with the network on: with the network off, pods run under the RuntimeClass %s, which gives them no network; to run them under %s, it must give pods no network, and be named as the RuntimeClass without network too: %w: %w",
			e.runtime, e.noNet, e.runtime, shared.ErrRuntime, backend.ErrSetup)
	}
	if err := noSubmounts(spec, e.claim.Root); err != nil {
		return nil, err
	}
	if spec.UID == 0 || spec.GID == 0 {
		return nil, fmt.Errorf("the workspace belongs to root, and calls never run as root; pods cannot idmap a claim, so chown the workspace to a non-root user: %w", backend.ErrSetup)
	}
	pod, err := e.podTemplate(spec)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, name string) (string, error) {
		p := pod.DeepCopy()
		p.Name = podName(name)
		if spec.Channels != "" {
			// The output channel sandbash made for this container (see
			// shared.LocalEngine): a FIFO on the claim, which joins the
			// two only because both run on one node.
			rel, err := e.inClaim(filepath.Join(spec.Channels, name), "the output channel")
			if err != nil {
				return "", err
			}
			c := &p.Spec.Containers[0]
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "claim", MountPath: shared.ChannelDir, SubPath: rel})
		}
		_, err := e.cs.CoreV1().Pods(e.namespace).Create(ctx, p, metav1.CreateOptions{})
		return p.Name, err
	}, nil
}

var notName = regexp.MustCompile(`[^a-z0-9-]+`)

// podName makes a container name a pod name (DNS-1123, at most 63
// characters so that it is also a valid hostname and label value).
func podName(name string) string {
	n := strings.Trim(notName.ReplaceAllString(strings.ToLower(name), "-"), "-")
	if n == strings.ToLower(name) && len(n) <= 63 {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	suffix := "-" + hex.EncodeToString(sum[:4])
	if len(n) > 63-len(suffix) {
		n = strings.TrimRight(n[:63-len(suffix)], "-")
	}
	return n + suffix
}

// labelValue makes s a label value (at most 63 of [a-zA-Z0-9._-],
// alphanumeric at both ends); the exact value is in the annotation of the
// same key.
func labelValue(s string) string {
	ok := len(s) <= 63 && regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`).MatchString(s)
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "h" + hex.EncodeToString(sum[:16])
}

// noSubmounts refuses a session whose mount sources have other mounts
// inside them, or sit on a mount inside the claim's root: a pod mounts its
// claim's directories without the mounts inside them (a subPath, a local
// volume: one bind, not recursive), so a call would see what a mount
// covers where sandbash sees what it holds.
func noSubmounts(spec *shared.Spec, root string) error {
	srcs := []string{spec.TmpDir, spec.HomeDir}
	for _, m := range spec.Mounts {
		if m.Source != "/dev/null" {
			srcs = append(srcs, m.Source)
		}
	}
	ms, err := mountinfo.GetMounts(nil)
	if err != nil {
		return fmt.Errorf("reading this process's mounts: %w", err)
	}
	inside := func(dir, p string) bool { // p is dir or below it
		rel, err := filepath.Rel(dir, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	for _, src := range srcs {
		for _, m := range ms {
			if m.Mountpoint != filepath.Clean(root) && inside(root, m.Mountpoint) && inside(m.Mountpoint, src) {
				return fmt.Errorf("%s is on a mount at %s (%s) inside the claim's root %s: pods mount the claim itself, so calls would see the claim's directory under that mount, not what sandbash sees; put it on the claim itself: %w",
					src, m.Mountpoint, m.FSType, root, backend.ErrSetup)
			}
			if rel, err := filepath.Rel(src, m.Mountpoint); err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") {
				return fmt.Errorf("%s has a mount inside it (%s, %s): pods mount the claim's directories without the mounts inside them, so calls would see what that mount covers, not what it holds; unmount it, or give its content a place in the claim itself: %w",
					src, m.Mountpoint, m.FSType, backend.ErrSetup)
			}
		}
	}
	return nil
}

// inClaim maps a host path the policy checked to its path inside the
// claim.
func (e *engine) inClaim(p, what string) (string, error) {
	rel, err := filepath.Rel(e.claim.Root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s %s is not inside the claim %s (which sandbash sees at %s): pods can only mount what is on the claim; put it there, or name the claim that holds it: %w: %w",
			what, p, e.claim.Name, e.claim.Root, ErrClaim, backend.ErrSetup)
	}
	if rel == "." {
		rel = ""
	}
	return rel, nil
}

// hardened is a pod of one container, "call", at the restricted Pod
// Security Standard and past it: run as uid:gid, non-root, every
// capability dropped, no privilege escalation, sandbash's seccomp profile,
// a read-only root filesystem, no service-account token, no service
// links, bound to the engine's node, under runtimeClass ("" the cluster's
// default), never restarted.
func (e *engine) hardened(name string, uid, gid int64, runtimeClass string) (*corev1.Pod, error) {
	yes, no := true, false
	scName, _, err := SeccompProfile()
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w", err)
	}
	sc := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: &scName}
	var rc *string
	if runtimeClass != "" {
		rc = &runtimeClass
	}
	grace := int64(2)
	psc := &corev1.PodSecurityContext{RunAsUser: &uid, RunAsGroup: &gid, RunAsNonRoot: &yes, SeccompProfile: sc}
	if e.strictGroups {
		strict := corev1.SupplementalGroupsPolicyStrict
		psc.SupplementalGroupsPolicy = &strict
	}
	meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}
	if o := e.ownerPod; o != nil {
		meta.Annotations[annOwnerPod] = ownerPodRef(o)
		if o.Namespace == e.namespace {
			// The cluster's garbage collector removes the pods once
			// sandbash's own pod is gone.
			meta.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: o.Name, UID: o.UID}}
		}
	}
	return &corev1.Pod{
		ObjectMeta: meta,
		Spec: corev1.PodSpec{
			NodeName:                      e.node,
			RuntimeClassName:              rc,
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Hostname:                      "sandbash",
			TerminationGracePeriodSeconds: &grace,
			SecurityContext:               psc,
			Containers: []corev1.Container{{
				Name: "call",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: &no,
					Privileged:               &no,
					ReadOnlyRootFilesystem:   &yes,
					RunAsNonRoot:             &yes,
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
					SeccompProfile:           sc,
				},
			}},
		},
	}, nil
}

// envPrelude is the shell text, run first in every pod's container
// before the supervisor, that makes the container what a call may run in:
//
//   - The container's environment is the pod's and the image's, merged by
//     the runtime, and a pod spec cannot remove the image's. The prelude
//     unsets every variable the pod did not set, before the supervisor's
//     exec (which replaces PID 1's environment with what is left).
//   - The runtime adds the supplementary groups that the image's
//     /etc/group gives the user, unless the node honours
//     supplementalGroupsPolicy Strict; a call must have none but the
//     workspace owner's group, and a process without CAP_SETGID cannot
//     drop them, so the prelude refuses to start the supervisor then.
func envPrelude(keep []string, uid, gid int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `while read -r sb_k sb_v; do
  [ "$sb_k" = Groups: ] || continue
  for sb_g in $sb_v; do
    [ "$sb_g" = %d ] && continue
    echo "sandbash: this node's container runtime gives uid %d the supplementary groups $sb_v, from the image's /etc/group, and cannot be told not to (supplementalGroupsPolicy Strict needs containerd 2.0 or CRI-O 1.31): a call gets no group but the workspace owner's (%d), so sandbash refuses this image here; use an image whose /etc/group does not list uid %d's user, or a node whose runtime supports Strict" >&2
    exit 96
  done
done < /proc/self/status
`, gid, uid, gid, uid)
	b.WriteString("for sb_v in $(compgen -e); do case $sb_v in")
	for _, k := range keep {
		b.WriteString(" " + k + ")")
		b.WriteString(" ;;")
	}
	b.WriteString(" *) unset -v \"$sb_v\" || exit 96;; esac; done\nunset -v sb_k sb_v sb_g\n")
	return b.String()
}

// escapeExpansion escapes a command for a pod spec, where the kubelet
// replaces $(NAME) with the value of the container's variable NAME and
// $$ with $ (so the supervisor's kill -USR1 $$ became kill -USR1 $, and
// the sandbox did not end a call at its deadline).
func escapeExpansion(cmd []string) []string {
	out := make([]string, len(cmd))
	for i, a := range cmd {
		out[i] = strings.ReplaceAll(a, "$", "$$")
	}
	return out
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (e *engine) podTemplate(spec *shared.Spec) (*corev1.Pod, error) {
	var mounts []corev1.VolumeMount
	add := func(src, target string, ro bool, what string) error {
		if src == "/dev/null" {
			// A mask (a host process's socket): a file of the pod's own
			// over it.
			mounts = append(mounts, corev1.VolumeMount{Name: "mask", MountPath: target, SubPath: "masked", ReadOnly: true})
			return nil
		}
		rel, err := e.inClaim(src, what)
		if err != nil {
			return err
		}
		mounts = append(mounts, corev1.VolumeMount{Name: "claim", MountPath: target, SubPath: rel, ReadOnly: ro})
		return nil
	}
	if err := add(spec.TmpDir, "/tmp", false, "the session's /tmp"); err != nil {
		return nil, err
	}
	if err := add(spec.HomeDir, backend.Home, false, "the session's HOME"); err != nil {
		return nil, err
	}
	for _, m := range spec.Mounts {
		if err := add(m.Source, m.Target, m.ReadOnly, "mount source"); err != nil {
			return nil, err
		}
	}
	if spec.Channels != "" {
		if _, err := e.inClaim(spec.Channels, "the session's output channels"); err != nil {
			return nil, err
		}
	}
	mounts = append(mounts, corev1.VolumeMount{Name: "supervisor", MountPath: shared.SupervisorDir})
	l := spec.Limits
	res := corev1.ResourceList{}
	if l.Memory > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(l.Memory, resource.BinarySI)
	}
	if l.CPUs > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.CPUs*1000), resource.DecimalSI)
	}
	// The limits bound a call; what it asks of the scheduler is little,
	// so that a session's warm pods and many sessions fit on one node (a
	// call is mostly idle, waiting for its turn).
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("10m"),
		corev1.ResourceMemory: resource.MustParse("16Mi"),
	}
	var env []corev1.EnvVar
	var keep []string
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		if !envName.MatchString(k) {
			return nil, fmt.Errorf("kubernetes: the supervisor's environment variable %q is not a shell name: %w", k, backend.ErrSetup)
		}
		env = append(env, corev1.EnvVar{Name: k, Value: v})
		keep = append(keep, k)
	}
	cmd := shared.Command()
	// The rlimits a pod spec cannot set: the supervisor's shell lowers
	// them for itself and the call before it starts.
	limits := fmt.Sprintf("ulimit -n %d && ulimit -u %d", l.NoFile, l.NProc)
	if l.FileSize > 0 {
		limits += fmt.Sprintf(" && ulimit -f %d", (l.FileSize+1023)/1024)
	}
	cmd[3] = waitFirst + envPrelude(keep, spec.UID, spec.GID) + limits + " || { echo 'sandbash: cannot set the rlimits' >&2; exit 96; }\n" + cmd[3]
	runtime := e.runtime
	if spec.Network != backend.NetworkOn {
		runtime = e.noNet
	}
	pod, err := e.hardened("", int64(spec.UID), int64(spec.GID), runtime)
	if err != nil {
		return nil, err
	}
	ann := shared.Labels(spec.ID)
	for k, v := range ann {
		pod.Annotations[k] = v
		if k == shared.LabelSession {
			pod.Labels[k] = labelValue(v)
		}
	}
	pod.Labels[labelManaged] = "true"
	tmpfs := resource.MustParse("16Mi")
	pod.Spec.Volumes = []corev1.Volume{
		{Name: "claim", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: e.claim.Name}}},
		{Name: "supervisor", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &tmpfs}}},
		{Name: "mask", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
			{Path: "masked", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}},
		}}}},
	}
	c := &pod.Spec.Containers[0]
	c.Image = spec.Image.Ref
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.Command = escapeExpansion(cmd)
	c.Env = env
	c.WorkingDir = spec.Workspace
	c.Stdin, c.StdinOnce = true, true
	c.VolumeMounts = mounts
	c.Resources = corev1.ResourceRequirements{Limits: res, Requests: requests}
	return pod, nil
}

// labelManaged marks every pod sandbash creates.
const labelManaged = "sandbash.managed"

// Run waits until the pod runs, attaches to its container, and lets the
// supervisor start (see waitFirst). Closing the attach stream's stdin
// closes the container's (stdinOnce), as does sandbash's death: the
// connection ends.
func (e *engine) Run(ctx context.Context, id string, stdout, stderr io.Writer) (shared.Stream, error) {
	if err := e.waitRunning(ctx, id); err != nil {
		return nil, err
	}
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.namespace).Name(id).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: "call", Stdin: true, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return nil, fmt.Errorf("attaching to pod %s: %w", id, err)
	}
	pr, pw := io.Pipe()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &stream{w: pw, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		err := ex.StreamWithContext(sctx, remotecommand.StreamOptions{Stdin: pr, Stdout: stdout, Stderr: stderr})
		if err != nil && sctx.Err() == nil {
			s.err = err
		}
		pr.CloseWithError(io.EOF)
	}()
	if _, err := s.Write([]byte("\n")); err != nil {
		s.Close()
		return nil, fmt.Errorf("attaching to pod %s: %w", id, err)
	}
	return s, nil
}

// waitRunning waits until the pod's container runs, and says why not
// when it cannot.
func (e *engine) waitRunning(ctx context.Context, id string) error {
	pods := e.cs.CoreV1().Pods(e.namespace)
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id).String()})
	if err != nil {
		return err
	}
	defer w.Stop()
	check := func(p *corev1.Pod) (bool, error) {
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Running != nil:
				return true, nil
			case cs.State.Terminated != nil:
				return false, fmt.Errorf("pod %s: its container ended before sandbash attached (%s, exit %d): %s", id, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
			case cs.State.Waiting != nil && badWaiting[cs.State.Waiting.Reason]:
				return false, fmt.Errorf("pod %s cannot start: %s: %s", id, cs.State.Waiting.Reason, cs.State.Waiting.Message)
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			return false, fmt.Errorf("pod %s failed: %s: %s", id, p.Status.Reason, p.Status.Message)
		}
		return false, nil
	}
	if p, err := pods.Get(ctx, id, metav1.GetOptions{}); err != nil {
		return err
	} else if ok, err := check(p); ok || err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s did not start: %w", id, ctx.Err())
		case ev, open := <-w.ResultChan():
			if !open {
				return e.waitRunning(ctx, id)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if ok, err := check(p); ok || err != nil {
				return err
			}
		}
	}
}

// badWaiting are the reasons a container waits that it will not get over
// by itself.
var badWaiting = map[string]bool{
	"ErrImageNeverPull": true, "ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

type stream struct {
	w      *io.PipeWriter
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
func (s *stream) CloseStdin() error     { return s.w.Close() }
func (s *stream) Done() <-chan struct{} { return s.done }
func (s *stream) Err() error            { <-s.done; return s.err }
func (s *stream) Close() {
	// EOF, not an error: client-go logs a failed stdin copy on stderr.
	s.w.Close()
	s.cancel()
	<-s.done
}

// Kill signals the call's processes from inside the pod: there is no API
// to signal a container. SIGTERM goes to the supervisor (PID 1), which
// passes it on to every process of the call; SIGKILL kills every process
// but the supervisor, which then reports the call's end. When the exec
// fails and the pod still runs, SIGKILL deletes the pod.
func (e *engine) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	script := "kill -TERM 1"
	if sig == syscall.SIGKILL {
		script = "kill -KILL -1"
	} else if sig != syscall.SIGTERM {
		script = "kill -" + strconv.Itoa(int(sig)) + " 1"
	}
	err := e.exec(ctx, id, []string{"bash", "-p", "-c", script})
	if err == nil {
		return nil
	}
	if ok, gerr := e.Exists(ctx, id); gerr == nil && !ok {
		return nil
	}
	if sig == syscall.SIGKILL {
		return e.Remove(ctx, id)
	}
	return err
}

func (e *engine) exec(ctx context.Context, id string, cmd []string) error {
	req := e.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.namespace).Name(id).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: "call", Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	// Stdout and stderr are copied by two goroutines: one buffer, locked.
	var out lockedBuffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out, Stderr: &out})
	if b := out.bytes(); err != nil && len(b) > 0 {
		err = fmt.Errorf("%w: %s", err, bytes.TrimSpace(b))
	}
	return err
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Clone(l.buf.Bytes())
}

// Remove deletes the pod and waits until the API no longer has it. The
// grace period is one second, not zero: a zero one deletes the API's
// object at once, while the node still stops the pod's processes and
// unmounts its volumes (the workspace) for a while after; with a grace
// period, the node deletes the object itself once the pod's processes are
// gone and its volumes unmounted.
func (e *engine) Remove(ctx context.Context, id string) error {
	gone, err := e.startRemove(ctx, id)
	if err != nil || gone {
		return err
	}
	return e.waitRemoved(ctx, id)
}

// startRemove asks the API to delete the pod (see [engine.Remove]); gone
// says that the API had no such pod.
func (e *engine) startRemove(ctx context.Context, id string) (gone bool, err error) {
	grace := int64(1)
	err = e.cs.CoreV1().Pods(e.namespace).Delete(ctx, podName(id), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}

// waitRemoved waits until the API no longer has the pod.
func (e *engine) waitRemoved(ctx context.Context, id string) error {
	id = podName(id)
	for {
		_, err := e.cs.CoreV1().Pods(e.namespace).Get(ctx, id, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s is still being deleted: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OOMKilled waits until the container has terminated and reads its
// status: the node says OOMKilled when the memory limit killed it.
func (e *engine) OOMKilled(ctx context.Context, id string) (bool, error) {
	for {
		p, err := e.cs.CoreV1().Pods(e.namespace).Get(ctx, id, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil {
				return t.Reason == "OOMKilled", nil
			}
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pid is unknown: the pod runs on a node, which the API does not open.
func (e *engine) Pid(ctx context.Context, id string) (int, error) { return 0, nil }

func (e *engine) Exists(ctx context.Context, id string) (bool, error) {
	_, err := e.cs.CoreV1().Pods(e.namespace).Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

func (e *engine) CreateVolume(ctx context.Context, v shared.Volume, labels map[string]string) error {
	return errors.New("volumes are not supported on Kubernetes")
}

func (e *engine) RemoveVolume(ctx context.Context, name string) error { return nil }

// List lists the pods sandbash made, with the labels it gave them (the
// annotations hold their exact values).
func (e *engine) List(ctx context.Context, kind shared.Kind, label string) ([]shared.Object, error) {
	if kind != shared.KindContainer {
		return nil, nil
	}
	ps, err := e.cs.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{LabelSelector: label})
	if err != nil {
		return nil, err
	}
	var out []shared.Object
	for _, p := range ps.Items {
		l := map[string]string{}
		for k, v := range p.Labels {
			l[k] = v
		}
		for k, v := range p.Annotations {
			if strings.HasPrefix(k, "sandbash.") {
				l[k] = v
			}
		}
		out = append(out, shared.Object{ID: p.Name, Labels: l})
	}
	return out, nil
}
