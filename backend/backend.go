// Package backend defines the one interface every sandbox backend implements,
// and the vocabulary the rest of sandbash uses to talk about sandboxes.
//
// # Sessions and calls
//
// A session is what an agent holds open while it works on one workspace: a
// workspace mount, extra readable and writable paths, a network policy, an
// environment, and a private /tmp and HOME that live as long as the session.
// A call is one agent command: `bash -c <command>` started fresh, at the
// workspace root, with stdin at /dev/null, in a sandbox that nothing of an
// earlier call survives in (apart from the session's /tmp and HOME).
//
// The root package sandbash owns the policy around a call: it validates and
// refuses requests, runs the timeout (SIGTERM to every process, SIGKILL after a
// grace period), bounds the output and spills it to a file. A backend only
// does what needs its own machinery: start the call, deliver a signal to every
// process of it, and report how its main process ended.
//
// # Lifecycle and ownership
//
//	b, _ := bwrap.New()                      // one Backend serves many sessions
//	s, _ := b.Open(ctx, spec)                // the caller created spec's directories
//	p, _ := s.Start(ctx, &Call{...})         // one call; ctx bounds only the start
//	p.Signal(unix.SIGTERM)                   // reaches every process of the call
//	st, _ := p.Wait()                        // main process gone, output drained
//	s.Close()                                // idempotent
//
// The caller owns [SessionSpec]'s directories (TmpDir, HomeDir) and removes
// them after [Session.Close]. A backend owns whatever it creates itself
// (containers, pools, volumes) and removes it in Close.
//
// # Guarantees every backend gives
//
//   - [Process.Wait] returns only once the main process has exited AND every
//     other process of the call (background jobs, setsid, nohup) has ended, and
//     all output they wrote has been delivered to [Call.Output].
//   - Output is one stream: stdout and stderr merged at the source, in write
//     order.
//   - [Session.Close] ends every call still running and releases everything
//     the session created; calling it twice is safe.
//
// The conformance suite in package backendtest checks all of this against a
// real sandbox; every backend runs it.
package backend

import (
	"context"
	"io"
	"net"
	"syscall"
	"time"
)

// Backend creates sandbox sessions. Implementations live in sibling packages
// (backend/bwrap, backend/docker, backend/podman).
type Backend interface {
	// Name is the short name users select the backend by: "bwrap", "docker", ...
	Name() string
	// Open prepares a session. It checks every mount source against the mount
	// policy (package workspace) and fails if the sandbox cannot be set up,
	// leaving nothing of the session behind: what it created for it
	// (containers, volumes, cgroups) is removed. What it fetched for the
	// host stays: a container backend may have pulled the image.
	Open(ctx context.Context, spec *SessionSpec) (Session, error)
	// Close releases what the backend itself holds (its connection to an
	// engine); close the sessions it opened first. It is idempotent.
	Close() error
}

// The optional interfaces below are what some backends can do beyond
// running calls; callers find them with a type assertion.

// Unstaged is implemented by backends whose sandboxes may not see the
// mounts the root package stages (package internal/hostmount clones them
// in sandbash's own mount namespace): Docker and Podman when sandbash runs
// in a container and the engine outside it; Kubernetes, whose pods mount a
// claim on a node by its path inside the claim. The root package then
// stages nothing and gives them the mount sources as the policy checked
// them; they map each to what backs it, refuse what they cannot, and check
// the identities (workspace.Verify) before each sandbox as every backend
// does. Nothing is idmapped either, so a root-owned workspace is refused.
type Unstaged interface {
	// Unstaged says why the sandboxes cannot see staged mounts, as a
	// clause ("sandbash runs in container ..."); "" when they can.
	Unstaged() string
}

// Collector is implemented by backends that can leave something behind
// when a sandbash process is killed (containers, volumes, cgroups).
type Collector interface {
	// GC removes what sandbash processes that are gone left, and lists
	// what it removed. It removes only what processes of this user left,
	// unless all is set (root: everyone's).
	GC(ctx context.Context, all bool) ([]string, error)
}

// Informer is implemented by backends that can describe what they run
// on, for `sandbash doctor`.
type Informer interface {
	Info(ctx context.Context) (Info, error)
}

// Info describes a backend on this host.
type Info struct {
	// Summary says in one line what runs the sandboxes, its version and
	// where it is.
	Summary string
	// Details are further lines, each "topic: text": the seccomp filter,
	// how limits are enforced, ...
	Details []string
}

// ImageRunner is implemented by backends that run calls in container
// images ([SessionSpec.Image]).
type ImageRunner interface {
	// HasImage reports whether image is on this machine, without pulling
	// it.
	HasImage(ctx context.Context, image string) (bool, error)
}

// Session runs calls for one agent session.
type Session interface {
	// Start starts one call. ctx bounds only the start itself; to end a
	// running call, use [Process.Signal].
	Start(ctx context.Context, c *Call) (Process, error)
	// Close ends every call still running and releases what the session
	// created. It is idempotent.
	Close() error
}

// Process is one running call.
type Process interface {
	// Signal delivers sig to every process of the call. After the call has
	// ended it does nothing and returns nil.
	Signal(sig syscall.Signal) error
	// Wait waits for the call to end (see the package guarantees) and
	// reports how its main process ended, as the sandbox reported it.
	// When the sandbox reported no exit status, the error wraps
	// [ErrNoExitStatus] (and Exit.OOMKilled says whether the memory limit
	// killed the call); when the output could not be read to its end, it
	// wraps [ErrOutputIncomplete]. It may be called once.
	Wait() (Exit, error)
}

// Exit is how a call's main process ended.
type Exit struct {
	// Code is the exit status of `bash -c` as the sandbox reported it (bash
	// itself reports 128+N for a command killed by signal N). A backend
	// that saw no status leaves it 0 and says so with [ErrNoExitStatus].
	Code int
	// OOMKilled is set when the sandbox's memory limit killed the call.
	OOMKilled bool
	// TimedOut is set when the sandbox itself ended the call at its
	// Call.Deadline, before sandbash did.
	TimedOut bool
}

// Call is one command to run.
type Call struct {
	// Command is passed as-is to `bash -c`.
	Command string
	// Output receives stdout and stderr as one stream. Writes come from one
	// goroutine at a time. Nil discards the output.
	Output io.Writer
	// Deadline, if set, is how long after it starts the sandbox ends the
	// call by itself (SIGTERM, then SIGKILL KillGrace later), should
	// sandbash not have ended it by then (sandbash stopped or wedged).
	// Backends whose sandbox dies with sandbash anyway may ignore it.
	Deadline, KillGrace time.Duration
	// Proxy serves the call's egress under [NetworkProxy]: the backend
	// calls it once, before the command runs, with a listener on
	// [ProxyAddr] in the call's own network namespace, and closes the
	// listener when the call has ended. It must return at once (serve
	// from a goroutine). Nil under other policies.
	Proxy func(net.Listener)
}

// Network is a session's network policy.
type Network string

const (
	// NetworkNone gives the sandbox no network but its own loopback. It is
	// the default (the zero value is treated as NetworkNone).
	NetworkNone Network = "none"
	// NetworkOn gives the sandbox a network of its own, never the host's:
	// user-mode networking (slirp4netns) in the call's own network
	// namespace on bwrap, the default bridge on container backends. The
	// host's loopback services and abstract unix sockets are out of reach.
	NetworkOn Network = "on"
	// NetworkProxy gives the sandbox no network but its own loopback, on
	// which sandbash's egress proxy listens at [ProxyAddr] (see
	// [Call.Proxy]): the sandbox reaches nothing else, and the proxy
	// decides where each connection goes. Users do not choose it: the
	// root package does, for a session with egress rules.
	NetworkProxy Network = "proxy"
)

// ProxyAddr is where the egress proxy listens inside a sandbox under
// [NetworkProxy]: HTTP (with CONNECT) and SOCKS5 on one port.
const ProxyAddr = "127.0.0.1:3128"

// Mount is one host path made visible in the sandbox at the same path.
type Mount struct {
	// Source is the host path, absolute and with symlinks resolved. A
	// mount that hides something (a host process's unix socket) has
	// /dev/null as its source.
	Source string
	// Target is where it appears in the sandbox: the absolute path the
	// user gave, so paths inside match paths outside.
	Target string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}

// Home is HOME inside every sandbox: a per-session writable directory.
const Home = "/home/sandbash"

// SandboxUID and SandboxGID are who calls run as when the workspace
// belongs to root: calls never run as host root. sandbash reserves them;
// no host account should use them.
const (
	SandboxUID = 65533
	SandboxGID = 65533
)

// SessionSpec describes the sandbox a session's calls run in. The root
// package sandbash builds it; backends read it and do not modify it.
type SessionSpec struct {
	// ID names the session; backends put it on what they create.
	ID string
	// Workspace is the workspace root: its target is the working directory
	// of every call. It is also the target of one of Mounts, or, in
	// overlay mode, of one of Overlays.
	Workspace string
	// Mounts are every host path the sandbox sees, already checked by the
	// mount policy, parents before children: the user's, and what the
	// policy adds to hold them in place and to hide or protect what is in
	// them (package workspace, Seal).
	Mounts []Mount
	// TmpDir is the host directory mounted at /tmp, kept for the session.
	TmpDir string
	// HomeDir is the host directory mounted at [Home].
	HomeDir string
	// Dir is the session's own host directory, which holds TmpDir and
	// HomeDir; only sandbash can write to it, and it is removed with the
	// session. A backend may keep private files there (the Podman backend's
	// seccomp profile).
	Dir string
	// UID and GID are who the call runs as: the workspace's owner, or
	// SandboxUID/SandboxGID for root's (never root). Every bind source is
	// already mapped so that the call owns what the workspace owner owns.
	UID, GID int
	// Env is the complete environment of a call, as NAME=VALUE.
	Env []string
	// Network is the network policy; "" means NetworkNone.
	Network Network
	// Image is the container image for container backends; bwrap runs on
	// the host's own system directories and refuses an image.
	Image string
	// Overlays are the session's copy-on-write caches.
	Overlays []Overlay
	// Identities are what every host path above (mount sources, TmpDir,
	// HomeDir, overlay directories) led to when the session opened, and
	// the paths that must not exist. Package workspace records them
	// (Seal); backends check them before every sandbox they set up
	// (workspace.Verify) and run nothing if one changed.
	Identities map[string]FileID
}

// FileID is what a host path led to when a session opened.
type FileID struct {
	// Dev and Ino identify the file.
	Dev, Ino uint64
	// Type is its file type (the S_IFMT bits of its mode); 0 means the
	// path must not exist.
	Type uint32
}

// Warmer is implemented by sessions that prepare sandboxes ahead of calls
// (the container backends' warm pools).
type Warmer interface {
	// WaitWarm waits until the next call will find a sandbox ready.
	WaitWarm(ctx context.Context) error
}

// Overlay is a copy-on-write directory: Lower is read-only (a host cache),
// writes land in Upper (the session's own), Work is overlayfs's scratch
// space on Upper's filesystem. Target is where it appears in the sandbox.
// A session's Upper has exactly one live mount at a time, however many calls
// overlap: backends mount each overlay once per session.
type Overlay struct {
	Name                       string
	Lower, Upper, Work, Target string
	// Layers are read-only layers between Upper and Lower, top first (a
	// reviewed workspace's checkpoints).
	Layers []string
	// Workspace marks the session's workspace in overlay mode: Lower is
	// the host workspace, Target the workspace's path, and the mount
	// takes the options that keep the layers reviewable (package
	// overlay's Options says which). It is mounted in the order of the
	// mounts, by the depth of its Target: what the session mounts inside
	// the workspace goes on top of it.
	Workspace bool
}
