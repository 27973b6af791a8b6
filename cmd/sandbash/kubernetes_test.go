//go:build sandbash_kubernetes

package main

import (
	"errors"
	"io"
	"os"
	"testing"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// TestKlogStaysOffStderr: once the Kubernetes backend's options are made,
// nothing client-go logs reaches stderr, errors included (klog writes
// those to stderr whatever its output is set to; a one-shot run on a slow
// cluster printed one between the call's output and its exit status).
func TestKlogStaysOffStderr(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = saved }()
	if _, err := kubernetesOptions("", "", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	klog.Error("klog.Error from the test")
	klog.ErrorS(errors.New("boom"), "klog.ErrorS from the test")
	klog.Warning("klog.Warning from the test")
	utilruntime.HandleError(errors.New("HandleError from the test"))
	klog.Flush()
	w.Close()
	os.Stderr = saved
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) > 0 {
		t.Fatalf("client-go's log reached stderr:\n%s", out)
	}
}
