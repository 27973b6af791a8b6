package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestLinksNoPodmanLibrary: sandbash links no module of Podman's. Its Go
// bindings (github.com/containers/podman/v5, and through them go.podman.io's
// storage, image and common) cost every run, whatever the backend, about
// 1.4 ms of package inits and 22 MB of peak RSS, and their pkg/rootless ran
// a C constructor before main that moved a program whose name contains
// "podman" into its user's rootless Podman user namespace, as a fake root.
// The Podman backend speaks the REST API itself (backend/podman/internal/libpod).
func TestLinksNoPodmanLibrary(t *testing.T) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("this test binary carries no build information")
	}
	for _, d := range bi.Deps {
		if strings.HasPrefix(d.Path, "github.com/containers/podman/") || strings.HasPrefix(d.Path, "go.podman.io/") {
			t.Errorf("sandbash links %s %s", d.Path, d.Version)
		}
	}
}
