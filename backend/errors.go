package backend

import "errors"

var (
	// ErrUnavailable means the backend cannot run on this host (tool or
	// daemon missing, user namespaces disabled, ...). The wrapping error
	// says what is missing and how to get it.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrSetup means a session's sandbox could not be set up, for example
	// a mount that the sandbox tool rejected.
	ErrSetup = errors.New("sandbox setup failed")
	// ErrClosed is returned by Start after the session was closed.
	ErrClosed = errors.New("session closed")
	// ErrNoExitStatus wraps Process.Wait's error when the call ended
	// without its sandbox reporting the exit status of its main process:
	// it was killed before it could (by sandbash's SIGKILL, or by the
	// memory limit: Exit.OOMKilled is then set), or the sandbox was lost
	// (its supervisor killed, the sandbox killed from outside). A backend
	// reports what it saw and makes up no status; the root package, which
	// knows whether it sent SIGKILL, reports 128+SIGKILL for such a call.
	ErrNoExitStatus = errors.New("no exit status")
	// ErrOutputIncomplete wraps Process.Wait's error when the call ended
	// but its output could not be read to its end: Call.Output may lack
	// the last of it.
	ErrOutputIncomplete = errors.New("output incomplete")
	// ErrNoImage means a container backend has no image to run calls
	// in: none was given, or the one given is not on this machine and
	// could not be pulled.
	ErrNoImage = errors.New("no image to run calls in")
	// ErrBadLimits is returned by Limits.Validate for limits no sandbox
	// can run under.
	ErrBadLimits = errors.New("bad resource limits")
)
