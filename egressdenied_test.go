package sandbash

import (
	"strings"
	"testing"
)

// TestObservationSaysDenialsLeftOut: when the denied list is full, the
// observation says how many denials it does not list, so decoys cannot
// hide what else the call tried.
func TestObservationSaysDenialsLeftOut(t *testing.T) {
	r := &Result{Command: "x", EgressDenied: []string{"a.test:80"}, EgressDeniedOmitted: 7}
	if obs := r.Observation(); !strings.Contains(obs, "a.test:80") || !strings.Contains(obs, "7 more denials not listed") {
		t.Errorf("observation of a full denied list: %q", obs)
	}
	r.EgressDeniedOmitted = 0
	if obs := r.Observation(); strings.Contains(obs, "not listed") {
		t.Errorf("observation of a complete denied list: %q", obs)
	}
}
