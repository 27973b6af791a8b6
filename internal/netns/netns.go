// Package netns makes network namespaces for sandboxes and opens sockets
// in them.
//
// A socket belongs to the network namespace of the thread that created
// it, for its whole life. So sandbash can serve a sandbox that has no
// network but its own loopback: it creates a listener on that loopback,
// from a thread that has joined the sandbox's namespace, and accepts on it
// from anywhere. Nothing of the host's network is exposed, and nothing
// runs in the sandbox to carry the connection out.
//
// Namespace operations change only the calling thread. Each function here
// runs them on a goroutine of its own, locked to its thread, and puts the
// thread back in this process's namespace afterwards. Threads are not left
// to end: a child started with a parent-death signal (Pdeathsig) gets it
// when the thread that started it ends, and any goroutine may have started
// one from that thread before. Only a thread whose namespace could not be
// put back is left locked, so Go ends it rather than run anything else on
// it.
//
// Creating and joining network namespaces needs CAP_SYS_ADMIN: sandbash
// running as root.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrPermission is returned when this process may not create or join a
// network namespace (it is not root).
var ErrPermission = errors.New("creating network namespaces needs root")

// New creates a network namespace with its loopback up and nothing else,
// and returns it as an open file (of /proc/thread-self/ns/net), which
// keeps it alive until closed or joined by a process.
func New() (*os.File, error) {
	return onThread(func() (*os.File, error) {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return nil, wrap("unshare(CLONE_NEWNET)", err)
		}
		if err := loopbackUp(); err != nil {
			return nil, err
		}
		return os.Open("/proc/thread-self/ns/net")
	}, true)
}

// Listen creates a TCP listener on addr in the network namespace ns.
func Listen(ns *os.File, addr string) (net.Listener, error) {
	return onThread(func() (net.Listener, error) {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return nil, wrap("setns", err)
		}
		return net.Listen("tcp", addr)
	}, true)
}

// Open opens the network namespace of process pid.
func Open(pid int) (*os.File, error) {
	return os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
}

// onThread runs f on a thread of its own. With back, the thread rejoins
// this process's network namespace afterwards and goes back to Go's
// pool; otherwise (or if it cannot) the thread ends with the goroutine.
func onThread[T any](f func() (T, error), back bool) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var orig *os.File
		if back {
			var err error
			if orig, err = os.Open("/proc/thread-self/ns/net"); err != nil {
				var zero T
				ch <- result{zero, err}
				return // still locked: the thread ends
			}
			defer orig.Close()
		}
		v, err := f()
		ch <- result{v, err}
		if back && unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	r := <-ch
	return r.v, r.err
}

func wrap(op string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w: %w", op, err, ErrPermission)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up the loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up the loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up the loopback: %w", err)
	}
	return nil
}
