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
)
