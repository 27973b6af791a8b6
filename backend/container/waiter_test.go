package container

import (
	"strings"
	"testing"
)

func TestHandover(t *testing.T) {
	got := string(Handover("n0nce", "echo é\n", []string{"A=1", "B=two\nlines", "C="}))
	want := "n0nce 8 3\necho é\nA=1\x00B=two\nlines\x00C=\x00"
	if got != want {
		t.Errorf("Handover = %q, want %q", got, want)
	}
	if got := string(Handover("n", "true", nil)); got != "n 4 0\ntrue" {
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
