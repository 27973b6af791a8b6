package main

import (
	"errors"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// flagHints name the flags behind the library's refusals. The library
// speaks of settings (an environment entry, a network policy), since its
// callers are not all this CLI; here the user gave them as flags, and the
// message should say which.
var flagHints = append([]flagHint{
	{sandbash.ErrBadEnv, "the variable came from --env NAME (taken from your environment) or --env NAME=VALUE"},
	{sandbash.ErrUnsafeEnv, "drop it from --env"},
	{sandbash.ErrBadNetwork, "give --network none or --network on"},
	{overlay.ErrBadCache, "check --cache NAME (or all) and --cache-dir HOST:SANDBOX"},
	{workspace.ErrBadPath, "check --workspace, --readable and --writable"},
	{backend.ErrNoImage, "give an image with --image IMAGE, SANDBASH_IMAGE, or \"image\" in .devcontainer/devcontainer.json (see sandbash trust)"},
	{backend.ErrBadLimits, "check --memory, --cpus and --pids"},
	{sandbash.ErrBadEgress, "check --allow, --resolve and --credential"},
	{container.ErrRuntime, "check --runtime (sandbash doctor lists the engine's runtimes), --network and --allow"},
}, kubernetesHints...)

type flagHint struct {
	err  error
	hint string
}

// withFlags adds to err the hint of the first refusal it wraps, if any.
func withFlags(err error) error {
	if err == nil {
		return nil
	}
	for _, h := range flagHints {
		if errors.Is(err, h.err) {
			return &hinted{err: err, hint: h.hint}
		}
	}
	return err
}

type hinted struct {
	err  error
	hint string
}

func (h *hinted) Error() string { return h.err.Error() + " (" + h.hint + ")" }
func (h *hinted) Unwrap() error { return h.err }
