package bwrap

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/sandbash/sandbash/backend"
)

// TestEnforcementClaimsOnlyWhatHolds: each limit a cgroup controller does
// not hold is enforced, and reported, as an rlimit; none is claimed per call
// without its controller.
func TestEnforcementClaimsOnlyWhatHolds(t *testing.T) {
	l := backend.DefaultLimits()
	for _, ctrls := range [][]string{nil, {"memory"}, {"pids"}, {"memory", "pids", "cpu"}} {
		e := &enforcer{l: l, nocgs: "test"}
		if ctrls != nil {
			e.cg = &cgroups{hs: []hierarchy{{v2: true, base: "/nonexistent", ctrls: ctrls}}}
		}
		en := e.enforcement()
		has := func(c string) bool { return slices.Contains(ctrls, c) }
		if en.Memory != has("memory") || en.Pids != has("pids") || en.CPU != has("cpu") {
			t.Errorf("controllers %v: enforcement %+v", ctrls, en)
		}
		if strings.Contains(en.Summary, "per call,") != has("memory") || strings.Contains(en.Summary, "RLIMIT_DATA") == has("memory") {
			t.Errorf("controllers %v: summary misstates memory: %s", ctrls, en.Summary)
		}
		if strings.Contains(en.Summary, "RLIMIT_NPROC") == has("pids") || strings.Contains(en.Summary, "CPU not limited") == has("cpu") {
			t.Errorf("controllers %v: summary misstates pids or CPU: %s", ctrls, en.Summary)
		}
		if has("memory") || has("pids") {
			continue
		}
		cl := &callLimits{rl: e.rlimits(4242)}
		got := cl.rl.ulimit()
		for _, want := range []string{"-f ", "-d ", "-u "} {
			if !strings.Contains(got, want) {
				t.Errorf("no cgroups: the sandbox's %q lacks %s", got, want)
			}
		}
		if r := readerScript(9, cl.rl); !strings.HasPrefix(r, got+" || exit 125; ") {
			t.Errorf("the command's bash does not set the call's rlimits before anything else, or goes on when it cannot: %s", r)
		}
		if rl := e.rlimits(0); rl.nproc > 0 {
			t.Errorf("RLIMIT_NPROC set for a call running as root, which it does not bind: %q", rl.ulimit())
		}
	}
}

func TestOwnerGone(t *testing.T) {
	self := sessionCgroupName("id/with.odd:chars")
	if ownerGone(self) {
		t.Errorf("%s: this process counts as gone", self)
	}
	if strings.ContainsAny(strings.SplitN(self, ".", 3)[2], "/.:") {
		t.Errorf("%s: the session id is not made safe", self)
	}
	if !ownerGone(fmt.Sprintf("%d.1.x", os.Getpid())) {
		t.Error("a start time that does not match counts as alive")
	}
	for _, name := range []string{"sandbash-self", "notes", "1.x.y"} {
		if ownerGone(name) {
			t.Errorf("%s: not sandbash's, yet counted as stale", name)
		}
	}
}
