package integration

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestEgressDecoysHideNothing: the denied list the agent and the user see
// stops at 32 destinations. A command that first asks the proxy for 32
// harmless names and then for the one it wants must not get that one
// denied unmentioned: --json says how many denials it leaves out, and so
// does the observation.
func TestEgressDecoysHideNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("egress rules need root (TestEgressDeniedReported checks the refusal as a user)")
	}
	c := newCLI(t)
	req := `get() { exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$1" "$1" >&3 && head -1 <&3 >/dev/null; exec 3>&-; }
for i in $(seq 1 32); do get decoy$i.test; done; get exfil.test; echo done`
	out, errOut, code := c.run("run", "--backend", "bwrap", "--json", "--allow", "allowed.test", "--", req)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var res struct {
		Output       string   `json:"output"`
		EgressDenied []string `json:"egress_denied"`
		Omitted      int      `json:"egress_denied_omitted"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(res.Output, "done") || len(res.EgressDenied) != 32 || slices.Contains(res.EgressDenied, "exfil.test:80") {
		t.Fatalf("output %q, egress_denied %q; want the 32 decoys listed", res.Output, res.EgressDenied)
	}
	if res.Omitted != 1 {
		t.Errorf("egress_denied_omitted = %d, want 1 (exfil.test, denied but not listed): %s", res.Omitted, out)
	}
	obs, errOut, code := c.run("run", "--backend", "bwrap", "--observation", "--allow", "allowed.test", "--", req)
	if code != 0 || !strings.Contains(obs, "1 more denials not listed") {
		t.Errorf("observation (exit %d) does not say a denial is left out: %s %s", code, obs, errOut)
	}
}
