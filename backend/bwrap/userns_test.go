package bwrap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUsernsRestriction: each kernel setting that blocks unprivileged user
// namespaces is named, with its fix.
func TestUsernsRestriction(t *testing.T) {
	for _, c := range []struct {
		file, value, want string
	}{
		{"user/max_user_namespaces", "0", "sysctl -w user.max_user_namespaces="},
		{"kernel/unprivileged_userns_clone", "0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"kernel/apparmor_restrict_unprivileged_userns", "1", "apparmor_restrict_unprivileged_userns=0"},
	} {
		dir := t.TempDir()
		for _, f := range []string{"user/max_user_namespaces", "kernel/unprivileged_userns_clone", "kernel/apparmor_restrict_unprivileged_userns"} {
			v := map[string]string{"user/max_user_namespaces": "15000", "kernel/unprivileged_userns_clone": "1", "kernel/apparmor_restrict_unprivileged_userns": "0"}[f]
			if f == c.file {
				v = c.value
			}
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := usernsRestriction(dir); !strings.Contains(got, c.want) {
			t.Errorf("%s=%s: %q, want the fix %q", c.file, c.value, got, c.want)
		}
	}
	if !inContainer() {
		if got := usernsRestriction(t.TempDir()); got != "" {
			t.Errorf("no restriction set, outside a container: %q", got)
		}
	}
}
