//go:build containers_image_openpgp

package podman

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sandbash/sandbash/backend/podman/internal/libpod"

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

// TestKeepIDMaps: the maps given in place of keep-id are keep-id's: for a
// user 1001 whose service's namespace holds itself and 65536 subordinate
// ids, container id 1001 is the namespace's 0 (the user), 0..1000 are
// 1..1001 and the rest are themselves; too few subordinate ids are
// refused, saying what to do.
func TestKeepIDMaps(t *testing.T) {
	ns := []libpod.IDMap{{ContainerID: 0, HostID: 1001, Size: 1}, {ContainerID: 1, HostID: 100000, Size: 65536}}
	got, err := keepID(ns, ns)
	if err != nil {
		t.Fatal(err)
	}
	want := []libpod.IDMap{{ContainerID: 0, HostID: 1, Size: 1001}, {ContainerID: 1001, HostID: 0, Size: 1}, {ContainerID: 1002, HostID: 1002, Size: 64535}}
	if !reflect.DeepEqual(got.UIDMap, want) || !reflect.DeepEqual(got.GIDMap, want) {
		t.Errorf("keepID = %+v, want both maps %+v", got, want)
	}
	small := []libpod.IDMap{{ContainerID: 0, HostID: 5000, Size: 1}, {ContainerID: 1, HostID: 100000, Size: 1000}}
	if _, err := keepID(small, ns); err == nil || !strings.Contains(err.Error(), "at least 5000 in /etc/subuid") {
		t.Errorf("too few subordinate uids: %v", err)
	}
}
