package ctrbackend

import (
	"context"
	"io"
	"syscall"
	"time"

	"github.com/sandbash/sandbash/backend"
)

// Engine is what a container engine (Docker, Podman) does for the one
// container lifecycle in this package ([Backend], its sessions and their
// calls). Everything else, the order of the steps, the warm pool, the
// handover, the heartbeat, the trailer, cleanup and collection, is here.
//
// Errors say what failed without naming the engine: the caller prefixes
// its Name. A container is named by the id its [CreateFunc] returned (or
// by the name it was created with, for Remove after a failed create).
// Cleanup calls get a context bounded by a timeout. Nothing here is
// Docker's own: an engine is whatever can create a container to [Spec],
// stream its stdio, signal, inspect, remove and list it by label, and
// hold a volume.
type Engine interface {
	// Name is the backend's name: "docker", "podman".
	Name() string

	// Image returns what the engine holds as ref; found is false, with a
	// nil error, when it holds no such image.
	Image(ctx context.Context, ref string) (img Image, found bool, err error)
	// Pull fetches ref, writing its progress to progress.
	Pull(ctx context.Context, ref string, progress io.Writer) error

	// Template returns how to create the containers of one session, all
	// alike but for their names (see [Spec] for what they must be). It
	// runs once per session, at Open, before anything is created.
	Template(spec *Spec) (CreateFunc, error)
	// Run starts a created container with its stdin, stdout and stderr
	// attached from the start, and returns once it started. Until the
	// stream ends, what the container writes to stdout and stderr goes, in
	// order, to stdout and stderr (from one goroutine); the container's
	// stdin is the stream's, and ends when sandbash goes away. On error
	// nothing of the stream is left; the caller removes the container.
	Run(ctx context.Context, id string, stdout, stderr io.Writer) (Stream, error)
	// Kill sends sig to the container's PID 1. It returns nil when the
	// container no longer runs or no longer exists.
	Kill(ctx context.Context, id string, sig syscall.Signal) error
	// Remove removes the container (killing it if it runs) with its
	// anonymous volumes, and returns once it is gone; nil if there is no
	// such container.
	Remove(ctx context.Context, id string) error
	// OOMKilled waits until the container no longer runs and reports
	// whether its memory limit killed it.
	OOMKilled(ctx context.Context, id string) (bool, error)
	// Pid returns the host process id of the running container's PID 1
	// (for joining its network namespace under backend.NetworkProxy); 0
	// when the engine does not say.
	Pid(ctx context.Context, id string) (int, error)
	// Exists reports whether the engine still has the container. Its error
	// is non-nil only when the engine cannot be reached.
	Exists(ctx context.Context, id string) (bool, error)

	// CreateVolume creates v, a volume the engine mounts once however
	// many containers use it, labelled with labels.
	CreateVolume(ctx context.Context, v Volume, labels map[string]string) error
	// RemoveVolume removes a volume; nil if there is none.
	RemoveVolume(ctx context.Context, name string) error

	// List returns the containers, or volumes, that carry the label key
	// label, with their labels (for [Backend.GC]).
	List(ctx context.Context, kind Kind, label string) ([]Object, error)
}

// CreateFunc creates one container of a session, named name, and returns
// its id. The container is created, not started.
type CreateFunc func(ctx context.Context, name string) (id string, err error)

// Stream is an attached container's stdin; its output goes where
// [Engine.Run] was told.
type Stream interface {
	// Write writes to the container's stdin.
	Write(p []byte) (int, error)
	// CloseStdin ends the container's stdin; its output goes on.
	CloseStdin() error
	// Done is closed once the stream has ended: no more output comes.
	Done() <-chan struct{}
	// Err is why the stream ended, once Done is closed: nil at its end.
	Err() error
	// Close ends the stream and returns once Done is closed.
	Close()
}

// Image is an image as a session opened with it.
type Image struct {
	// Ref is the name the session gave; ID is what it named when the
	// session opened ("" when the engine does not say).
	Ref, ID string
	// Env is the environment the image's config sets, NAME=VALUE.
	Env []string
}

// Spec is what every container of a session must be. An engine creates
// each container from the session's Image: run as UID:GID (given
// numerically, so that no supplementary group comes from the image), with
// Env as its whole environment (none of the image's or the engine's
// configuration's variables), entrypoint none and Command as its command,
// working directory Workspace, hostname "sandbash", Labels, stdin open
// (see [Engine.Run]), no terminal, no init (Command is PID 1, whatever
// the engine's default), log driver none (the attach stream carries the
// output; the engine keeps no copy), every capability dropped,
// no-new-privileges, sandbash's seccomp profile (package
// internal/seccomp), a read-only root filesystem, a private IPC namespace,
// no network unless Network is on (then the engine's default bridge; under
// backend.NetworkProxy none, and sandbash adds the proxy's listener), the
// Limits (memory with no swap, CPUs, pids, and the nofile, nproc and fsize
// rlimits), bind mounts of TmpDir at /tmp, HomeDir at [backend.Home] and
// each of Mounts (nosuid where the engine's API can say so), the Volumes
// (nosuid), and a 16 MiB exec, nosuid, nodev tmpfs at [SupervisorDir]
// that UID can write to; with Runtime, under that OCI runtime.
type Spec struct {
	*backend.SessionSpec
	Image   Image
	Env     []string
	Command []string
	Limits  Limits
	// LocalDir is where sandbash itself reaches SessionSpec.Dir (which
	// names it as the engine's host does: see Config.HostPaths), for
	// files the engine reads there.
	LocalDir string
	// Runtime is the engine's OCI runtime for the containers ("" for its
	// default).
	Runtime string
	// Volumes are the session's cache volumes, one per SessionSpec.Overlays
	// entry, in order.
	Volumes []Volume
	// AutoRemove: the engine removes each container itself once it exited
	// (docker run --rm). A one-shot session then need not wait for the
	// removal of a container whose call reported its end (see
	// process.release).
	AutoRemove bool
	// Channels, when not "", is a host directory: each container, named
	// name, gets Channels/name bound (read-write, nosuid) at [ChannelDir],
	// where sandbash offers its supervisor a FIFO for the call's output
	// (see [LocalEngine]).
	Channels string
}

// LocalEngine is an [Engine] that can say whether it runs on this host,
// seeing this host's files (a Unix socket, not a remote DOCKER_HOST or
// CONTAINER_HOST). Only then does sandbash offer each container a FIFO of
// its own for the call's output, which spares the output the engine's
// attach stream (several processes copying it, 50 to 100 MB/s); else, and
// for engines that do not implement it, the output goes through the attach
// stream.
type LocalEngine interface {
	Local() bool
}

// AutoRemover is an [Engine] that removes a container by itself once it
// exited when [Spec.AutoRemove] asks it to (docker run --rm). Only then
// does a one-shot session leave its containers' removal to the engine;
// with any other engine it removes each container itself.
type AutoRemover interface {
	Engine
	AutoRemoves() bool
}

// SlowStarter is an [Engine] whose containers may take longer to start
// than a local engine's cleanupTimeout (30 s): a pod waits for a node, an
// image pull, a cluster scaling up. StartTimeout bounds the making of
// one container, from create to a waiting supervisor.
type SlowStarter interface {
	Engine
	StartTimeout() time.Duration
}

// Volume is a session's cache: an overlay volume named Name, mounted at
// Overlay.Target.
type Volume struct {
	Name    string
	Overlay backend.Overlay
}

// Kind is a kind of object an engine lists.
type Kind string

// The kinds of object [Backend.GC] collects.
const (
	KindContainer Kind = "container"
	KindVolume    Kind = "volume"
)

// Object is a listed container (ID is its id) or volume (its name).
type Object struct {
	ID     string
	Labels map[string]string
}
