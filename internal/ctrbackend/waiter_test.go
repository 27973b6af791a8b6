package ctrbackend

import (
	"strings"
	"testing"
	"time"
)

func TestHandover(t *testing.T) {
	got := string(Handover("n0nce", "echo é\n", []string{"A=1", "B=two\nlines", "C="}, 127*time.Second+time.Millisecond, 5*time.Second))
	want := "n0nce 8 3 128 5 6\necho é\nA=1\x00B=two\nlines\x00C=\x00"
	if got != want {
		t.Errorf("Handover = %q, want %q", got, want)
	}
	if got := string(Handover("n", "true", nil, 0, 0)); got != "n 4 0 0 0 6\ntrue" {
		t.Errorf("Handover without environment = %q", got)
	}
}

func TestCheckEnv(t *testing.T) {
	if err := CheckEnv([]string{"PATH=/bin", "_x1=", "A=b=c", "N=two\nlines"}); err != nil {
		t.Errorf("CheckEnv refused a good environment: %v", err)
	}
	for _, bad := range []string{"NOVALUE", "=x", "1A=x", "A-B=x", "A B=x", "A=x\x00y", "A\x00=x", "É=x"} {
		if err := CheckEnv([]string{"OK=1", bad}); err == nil || !strings.Contains(err.Error(), "NAME=VALUE") {
			t.Errorf("CheckEnv(%q) = %v, want a refusal", bad, err)
		}
	}
}
