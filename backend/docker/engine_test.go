package docker

import (
	"testing"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

// TestRuntimeInContainerSpec: --runtime reaches the daemon as the
// container's runtime; without it the daemon's default is left alone.
func TestRuntimeInContainerSpec(t *testing.T) {
	e := &engine{}
	for _, rt := range []string{"", "kata", "crun"} {
		o := e.createOptions(&shared.Spec{SessionSpec: &backend.SessionSpec{ID: "x", Workspace: "/ws"}, Runtime: rt})
		if o.HostConfig.Runtime != rt {
			t.Errorf("runtime %q: the container's HostConfig.Runtime is %q", rt, o.HostConfig.Runtime)
		}
	}
}
