package ctrbackend

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/hostpath"
)

// TestNetworkRefusals: what a runtime or a sandbash in a container
// cannot give is refused at open, saying why: egress rules under any
// runtime but the default (its network stack never sees the proxy's
// listener) or from inside a container (sandbash cannot reach the call
// container's network namespace); --network on under a runtime
// registered to give no network.
func TestNetworkRefusals(t *testing.T) {
	inCtr := hostpath.New("abc", nil)
	for _, c := range []struct {
		net  backend.Network
		cfg  Config
		want string // "" accepted
	}{
		{backend.NetworkProxy, Config{Runtime: "kata"}, "egress rules cannot work under the runtime kata"},
		{backend.NetworkProxy, Config{HostPaths: inCtr}, "sandbash runs in container abc"},
		{backend.NetworkOn, Config{Runtime: "nonet", RuntimeNoNetwork: true}, "the network on would get none"},
		{backend.NetworkOn, Config{Runtime: "kata"}, ""},
		{backend.NetworkOn, Config{HostPaths: inCtr}, ""},
		{backend.NetworkNone, Config{Runtime: "nonet", RuntimeNoNetwork: true}, ""},
	} {
		err := checkProxy("docker", &backend.SessionSpec{Network: c.net}, c.cfg)
		if c.want == "" && err != nil {
			t.Errorf("%s %+v: refused: %v", c.net, c.cfg, err)
		}
		if c.want != "" && (!errors.Is(err, backend.ErrSetup) || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s %+v: %v; want a refusal saying %q", c.net, c.cfg, err, c.want)
		}
	}
}
