package kubernetes

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

func testSpec(network backend.Network) *shared.Spec {
	return &shared.Spec{
		SessionSpec: &backend.SessionSpec{
			ID: "Sess_1.x", Workspace: "/claim/ws", UID: 4242, GID: 4242, Network: network,
			TmpDir: "/claim/s/tmp", HomeDir: "/claim/s/home",
			Mounts: []backend.Mount{{Source: "/claim/ws", Target: "/claim/ws"}, {Source: "/dev/null", Target: "/claim/ws/agent.sock", ReadOnly: true}},
		},
		Image: shared.Image{Ref: "img"}, Command: shared.Command(), Limits: shared.DefaultLimits(),
	}
}

// TestPodIsRestricted checks the pod against the restricted Pod Security
// Standard's rules, and that it mounts nothing of the node's but the claim.
func TestPodIsRestricted(t *testing.T) {
	e := &engine{claim: Claim{Name: "ws", Root: "/claim"}, noNet: "nonet"}
	for _, n := range []backend.Network{backend.NetworkNone, backend.NetworkOn} {
		p, err := e.podTemplate(testSpec(n))
		if err != nil {
			t.Fatal(err)
		}
		s := p.Spec
		if s.HostNetwork || s.HostPID || s.HostIPC || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
			t.Errorf("host namespaces or a token: %+v", s)
		}
		if n == backend.NetworkNone && (s.RuntimeClassName == nil || *s.RuntimeClassName != "nonet") {
			t.Errorf("network none without the no-network RuntimeClass: %v", s.RuntimeClassName)
		}
		for _, v := range s.Volumes {
			if v.HostPath != nil {
				t.Errorf("hostPath volume %s", v.Name)
			}
		}
		if s.SecurityContext.RunAsNonRoot == nil || !*s.SecurityContext.RunAsNonRoot || *s.SecurityContext.RunAsUser != 4242 {
			t.Errorf("pod security context %+v", s.SecurityContext)
		}
		c := s.Containers[0]
		sc := c.SecurityContext
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 ||
			(sc.Privileged != nil && *sc.Privileged) {
			t.Errorf("container security context %+v", sc)
		}
		// sandbash's own profile, never the runtime's default (which
		// lets io_uring through), on the pod and its container.
		name, _, err := SeccompProfile()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []*corev1.SeccompProfile{s.SecurityContext.SeccompProfile, sc.SeccompProfile} {
			if p == nil || p.Type != corev1.SeccompProfileTypeLocalhost || p.LocalhostProfile == nil || *p.LocalhostProfile != name {
				t.Errorf("seccomp profile %+v; want Localhost %s", p, name)
			}
		}
		if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
			t.Errorf("no memory limit: %+v", c.Resources)
		}
		if !strings.Contains(c.Command[3], "ulimit -n") || !strings.Contains(c.Command[3], "ulimit -u") {
			t.Errorf("the supervisor sets no rlimits: %q", c.Command[3])
		}
		var sub []string
		for _, m := range c.VolumeMounts {
			sub = append(sub, m.Name+":"+m.SubPath+">"+m.MountPath)
		}
		if got, want := strings.Join(sub, " "), "claim:s/tmp>/tmp claim:s/home>/home/sandbash claim:ws>/claim/ws mask:masked>/claim/ws/agent.sock supervisor:>/run/sandbash"; got != want {
			t.Errorf("mounts %s\nwant   %s", got, want)
		}
		if l := p.Labels[shared.LabelSession]; l != "Sess_1.x" || p.Annotations[shared.LabelOwner] == "" {
			t.Errorf("labels %v, annotations %v", p.Labels, p.Annotations)
		}
	}
}

// TestRefusals: what is not on the claim, caches, egress and root.
func TestRefusals(t *testing.T) {
	e := &engine{claim: Claim{Name: "ws", Root: "/claim"}, noNet: "nonet"}
	out := testSpec(backend.NetworkNone)
	out.Mounts = append(out.Mounts, backend.Mount{Source: "/claimx/secret", Target: "/x", ReadOnly: true})
	cache := testSpec(backend.NetworkNone)
	cache.Volumes = []shared.Volume{{Name: "v"}}
	proxy := testSpec(backend.NetworkProxy)
	root := testSpec(backend.NetworkNone)
	root.UID = 0
	for name, sp := range map[string]*shared.Spec{"outside the claim": out, "cache": cache, "egress": proxy, "root": root} {
		if _, err := e.Template(sp); err == nil || !(errors.Is(err, backend.ErrSetup) || errors.Is(err, backend.ErrUnavailable)) {
			t.Errorf("%s: %v, want a refusal", name, err)
		}
	}
}

func TestNames(t *testing.T) {
	long := strings.Repeat("A", 64)
	for _, in := range []string{"sandbash-abc-1", "sandbash-" + long + "-12", "sandbash-a_b.C-3"} {
		n := podName(in)
		if len(n) > 63 || notName.MatchString(n) || strings.HasPrefix(n, "-") || strings.HasSuffix(n, "-") {
			t.Errorf("podName(%q) = %q", in, n)
		}
		if podName(n) != n {
			t.Errorf("podName is not idempotent on %q", n)
		}
	}
	if v := labelValue(long); len(v) > 63 {
		t.Errorf("labelValue(64 chars) = %q", v)
	}
}
