package workspace

import "errors"

var (
	// ErrControlSocket: the path is, contains, or leads to a container
	// control socket. Mounting it would hand the sandbox the host.
	ErrControlSocket = errors.New("container control socket")
	// ErrSocket: the path is a unix socket. No socket is ever mounted.
	ErrSocket = errors.New("unix socket")
	// ErrTooBroad: the path may not be writable (the filesystem root or the
	// host's home directory).
	ErrTooBroad = errors.New("too broad to be writable")
	// ErrReserved: the path collides with a directory the sandbox provides
	// itself (/, /proc, /dev, /sys, /tmp, the sandbox HOME).
	ErrReserved = errors.New("reserved path in the sandbox")
	// ErrBadPath: the path does not exist, is not a directory where one is
	// needed, or is not usable for another reason given in the message.
	ErrBadPath = errors.New("unusable path")
	// ErrNested: a host path the session needs held in place (a cache or
	// session directory) lies inside a writable mount, where a call could
	// replace it.
	ErrNested = errors.New("inside a writable mount")
	// ErrChanged: a host path the session checked when it opened now leads
	// elsewhere (it was replaced, moved, or turned into a symlink), or a
	// file that must not exist appeared. Nothing runs on it.
	ErrChanged = errors.New("changed since the session opened")
)
