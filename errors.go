package sandbash

import "errors"

// Refusals: Run returns these, wrapped with details, before anything runs.
var (
	ErrEmptyCommand    = errors.New("empty command")
	ErrCommandTooLarge = errors.New("command too large")
	ErrNULByte         = errors.New("command contains a NUL byte")
	ErrTimeoutRange    = errors.New("timeout out of range")
	ErrDeclined        = errors.New("command declined at confirmation")
)

var (
	// ErrClosed is returned by Run on a closed session.
	ErrClosed = errors.New("session closed")
	// ErrBadEnv is returned by Open (and ResolveEnv) for a Config.Env
	// entry it cannot pass.
	ErrBadEnv = errors.New("bad environment entry")
	// ErrBadNetwork is returned by Open (and CheckNetwork) for a network
	// policy other than none and on.
	ErrBadNetwork = errors.New("unknown network policy")
	// ErrOtherOwner is returned by Open when a non-root sandbash is asked
	// to run calls as another user on a container engine.
	ErrOtherOwner = errors.New("workspace owned by another user")
	// ErrUnsafeEnv is returned by Open (and CheckEnv) for a Config.Env entry
	// that would change how bash or the dynamic linker start: PATH, BASH_ENV,
	// ENV, LD_* and the like. A command sets those itself.
	ErrUnsafeEnv = errors.New("environment variable that changes how the sandbox starts")
)
