//go:build !sandbash_kubernetes

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/sandbash/sandbash/backend"
)

// kubernetesBinary is the build of sandbash with the Kubernetes backend
// (make build: go build -tags sandbash_kubernetes). The Kubernetes client
// is kept out of sandbash itself because every process pays for it at
// start-up, before main: about 5 ms and 30 MB of the binary paged in, on
// every one-shot call of every other backend. sandbash hands a command
// that needs Kubernetes (--backend kubernetes, a session opened with it,
// doctor, gc) to that build, found next to sandbash itself, with its own
// arguments and the environment it started with.
const kubernetesBinary = "sandbash-kubernetes"

// startEnv is the environment sandbash started with (mcp unsets the token
// variable once read), for sandbash-kubernetes.
var startEnv = os.Environ()

var kubernetesBackend = namedBackend{
	name: "kubernetes",
	open: func(context.Context, containerOptions) (backend.Backend, error) {
		err := handToKubernetesBuild()
		if err == nil {
			err = errNoKubernetesBuild()
		}
		return nil, fmt.Errorf("--backend kubernetes: %w", err)
	},
}

// kubernetesBuild finds sandbash-kubernetes next to this binary; "" if it
// is not there. Never on PATH: sandbash is often started with a PATH that
// names directories of the workspace (an activated .venv/bin,
// node_modules/.bin under npm run), where calls can put a file of that
// name, which would then run on the host.
func kubernetesBuild() string {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), kubernetesBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// handToKubernetesBuild replaces this process with sandbash-kubernetes,
// given this process's arguments and the environment it started with. It
// returns nil when there is no such build, and an error if the exec
// failed.
func handToKubernetesBuild() error {
	if from := os.Getenv(handOffEnv); from != "" {
		// This binary was handed the command: it is not the build with
		// Kubernetes, whatever its name says.
		return fmt.Errorf("%s was handed this command as sandbash-kubernetes, but it is a build of sandbash without the Kubernetes backend; build it with the tag sandbash_kubernetes (make build)", from)
	}
	p := kubernetesBuild()
	if p == "" {
		return nil
	}
	env := append(slices.Clip(startEnv), handOffEnv+"="+p)
	err := syscall.Exec(p, append([]string{p}, os.Args[1:]...), env)
	return fmt.Errorf("starting %s, the build of sandbash with the Kubernetes backend: %v", p, err)
}

func errNoKubernetesBuild() error {
	dir := "this binary's directory"
	if self, err := os.Executable(); err == nil {
		dir = filepath.Dir(self)
	}
	return errors.New("this sandbash is built without the Kubernetes client (which would slow every other backend's start), and " + kubernetesBinary + ", the build with it, is not in " + dir + ", where sandbash looks for it (never on PATH): install it there (make build makes bin/" + kubernetesBinary + ")")
}

// kubernetesDoctor is doctor's line when sandbash-kubernetes is missing
// (otherwise doctor runs there).
func kubernetesDoctor(context.Context, string, string, string) (string, bool) {
	return errNoKubernetesBuild().Error(), false
}

// kubernetesGC collects nothing: gc runs in sandbash-kubernetes when it is
// installed, and without it there is no way to reach a cluster.
func kubernetesGC(context.Context, string, bool) ([]string, error) { return nil, nil }

var kubernetesHints []flagHint
