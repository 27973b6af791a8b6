package ctrbackend

import (
	"errors"
	"testing"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/hostpath"
)

// TestEngineSpecHostPaths: inside a container, every path the engine is
// given is the host's, and the session's own spec keeps sandbash's view
// (its checks stat those paths); a path on no host mount is refused.
func TestEngineSpecHostPaths(t *testing.T) {
	sp := &backend.SessionSpec{
		Mounts: []backend.Mount{
			{Source: "/workspaces/proj", Target: "/workspaces/proj"},
			{Source: "/workspaces/proj/.git/hooks", Target: "/workspaces/proj/.git/hooks", ReadOnly: true},
			{Source: "/dev/null", Target: "/workspaces/proj/agent.sock", ReadOnly: true},
		},
		TmpDir:  "/state/runs/s1/tmp",
		HomeDir: "/state/runs/s1/home",
		Dir:     "/state/runs/s1",
		Overlays: []backend.Overlay{{
			Lower: "/workspaces/cache", Upper: "/state/runs/s1/c/upper", Work: "/state/runs/s1/c/work",
			Layers: []string{"/state/runs/s1/c/l1"}, Target: "/home/sandbash/go",
		}},
	}
	cfg := Config{HostPaths: hostpath.New("abc", []hostpath.Mount{
		{Source: "/home/me/proj", Destination: "/workspaces/proj"},
		{Source: "/home/me/cache", Destination: "/workspaces/cache"},
		{Source: "/srv/sb", Destination: "/state"},
	})}
	es, err := engineSpec(sp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/home/me/proj", "/home/me/proj/.git/hooks", "/dev/null"}
	for i, m := range es.Mounts {
		if m.Source != want[i] || m.Target != sp.Mounts[i].Target {
			t.Errorf("mount %d: %+v, want source %s at %s", i, m, want[i], sp.Mounts[i].Target)
		}
	}
	o := es.Overlays[0]
	if es.TmpDir != "/srv/sb/runs/s1/tmp" || es.HomeDir != "/srv/sb/runs/s1/home" || es.Dir != "/srv/sb/runs/s1" ||
		o.Lower != "/home/me/cache" || o.Upper != "/srv/sb/runs/s1/c/upper" || o.Work != "/srv/sb/runs/s1/c/work" || o.Layers[0] != "/srv/sb/runs/s1/c/l1" {
		t.Errorf("engine spec: %+v", es)
	}
	if sp.Mounts[0].Source != "/workspaces/proj" || sp.TmpDir != "/state/runs/s1/tmp" || sp.Overlays[0].Upper != "/state/runs/s1/c/upper" || sp.Overlays[0].Layers[0] != "/state/runs/s1/c/l1" {
		t.Errorf("the session's own spec changed: %+v", sp)
	}
	// The session directory on the container's own filesystem.
	sp.TmpDir = "/tmp/sandbash-s1/tmp"
	if _, err := engineSpec(sp, cfg); !errors.Is(err, hostpath.ErrNotOnHost) {
		t.Errorf("a /tmp on the container's own filesystem: %v, want a refusal", err)
	}
}
