package oci

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	upstream "go.podman.io/common/pkg/seccomp"
)

// TestDefaultProfile: default.json is still Podman's default profile (of
// the go.podman.io/common in go.mod), and reads back as it: the same JSON,
// field for field. SANDBASH_UPDATE_SECCOMP=1 rewrites it.
func TestDefaultProfile(t *testing.T) {
	want, err := json.MarshalIndent(upstream.DefaultProfile(), "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if os.Getenv("SANDBASH_UPDATE_SECCOMP") == "1" {
		if err := os.WriteFile("default.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skip("default.json rewritten; run the test again to check it")
	}
	if !bytes.Equal(defaultJSON, want) {
		t.Fatalf("default.json is not go.podman.io/common's DefaultProfile; rewrite it: SANDBASH_UPDATE_SECCOMP=1 go test ./internal/seccomp/oci")
	}
	p, err := DefaultProfile()
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.MarshalIndent(p, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if got = append(got, '\n'); !bytes.Equal(got, want) {
		t.Errorf("DefaultProfile does not read back as the JSON it was read from:\n%s", got)
	}
}
