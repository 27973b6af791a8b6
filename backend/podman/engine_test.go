//go:build containers_image_openpgp

package podman

import (
	"testing"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
)

// TestRuntimeInContainerSpec: --runtime reaches the service as the
// container's OCI runtime; without it the service's default is left alone.
func TestRuntimeInContainerSpec(t *testing.T) {
	for _, rt := range []string{"", "kata", "crun"} {
		g := (&engine{}).specFor(&shared.Spec{SessionSpec: &backend.SessionSpec{ID: "x", Workspace: "/ws"}, Runtime: rt}, "/p.json", "n")
		if g.OCIRuntime != rt {
			t.Errorf("runtime %q: the container spec's OCIRuntime is %q", rt, g.OCIRuntime)
		}
	}
}
