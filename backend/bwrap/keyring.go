package bwrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// A process inherits its parent thread's session keyring, and everything in
// it is readable to whoever possesses it: a Kerberos ticket, a filesystem
// key. So each bwrap starts from a thread that has just joined a new, empty,
// anonymous session keyring (the seccomp filter keeps the call from making
// keys of its own).
//
// Credentials, keyrings included, belong to one thread, and Go forks from
// the calling thread; but a child with a parent-death signal (bwrap's
// Pdeathsig, and --die-with-parent) gets it when that thread exits, not
// the process. So one launcher thread, locked for good and never running
// anything else, starts every bwrap, and joins a fresh keyring before each.
//
// The same thread gives a call its own network namespace (one sandbash made,
// package internal/netns) when the call's bwrap shares it (--share-net): it
// joins the namespace, starts bwrap, and goes back to the process's own.
// Likewise it steps into the call's cgroups, so that the launcher is born
// there (see callCgroup.enterThread), and back out.
var launcher struct {
	once sync.Once
	reqs chan freshStart
}

type freshStart struct {
	cmd  *exec.Cmd
	ns   *os.File    // the network namespace to start cmd in; nil: the process's
	cg   *callCgroup // the cgroups to start cmd in, where it can; nil: the thread's
	done chan error
}

// startFresh starts cmd with a fresh, empty session keyring, in network
// namespace ns if it is not nil, and in what it can of cgroups cg if that
// is not nil (see callCgroup.born for which).
func startFresh(cmd *exec.Cmd, ns *os.File, cg *callCgroup) error {
	startLauncher()
	l := freshStart{cmd: cmd, ns: ns, cg: cg, done: make(chan error, 1)}
	launcher.reqs <- l
	return <-l.done
}

// startLauncher starts the launcher thread, once.
func startLauncher() {
	launcher.once.Do(func() {
		launcher.reqs = make(chan freshStart)
		go launchLoop()
	})
}

func launchLoop() {
	runtime.LockOSThread() // never unlocked: this thread's keyring is not the process's
	home, err := os.Open("/proc/thread-self/ns/net")
	for l := range launcher.reqs {
		if !launchOne(l, home, err) {
			// This thread cannot go home: end it (its children get
			// their parent-death signal) and start another.
			go launchLoop()
			return
		}
	}
}

// launchOne starts l.cmd from the launcher thread, and reports whether the
// thread is back in the process's network namespace and cgroups.
func launchOne(l freshStart, home *os.File, homeErr error) bool {
	if l.ns != nil {
		if homeErr != nil {
			l.done <- fmt.Errorf("bwrap: opening this thread's network namespace: %w", homeErr)
			return true
		}
		if err := unix.Setns(int(l.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			l.done <- fmt.Errorf("bwrap: joining the call's network namespace: %w", err)
			return true
		}
	}
	var leave func() error
	var err error
	if l.cg != nil {
		leave, err = l.cg.enterThread()
	}
	if err == nil {
		err = startWithNewKeyring(l.cmd)
	}
	var back error
	if leave != nil {
		back = leave()
	}
	if l.ns != nil {
		if e := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); e != nil {
			back = errors.Join(back, fmt.Errorf("leaving the call's network namespace: %w", e))
		}
	}
	if back != nil {
		if err == nil {
			_ = l.cmd.Process.Kill()
			_ = l.cmd.Wait()
			err = fmt.Errorf("bwrap: %w", back)
		}
		l.done <- err
		return false
	}
	l.done <- err
	return true
}

func startWithNewKeyring(cmd *exec.Cmd) error {
	// KEYCTL_JOIN_SESSION_KEYRING with a NULL name makes a new anonymous
	// keyring (a name, even "", would join an existing one of that name).
	_, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	switch {
	case e == 0:
	case e == unix.ENOSYS:
		// A kernel without keyrings has none to hand on.
	case errors.Is(e, unix.EDQUOT):
		return fmt.Errorf("bwrap: giving the call a fresh session keyring: %w; this user holds too many keys (see /proc/key-users; sysctl kernel.keys.maxkeys raises the limit)", e)
	default:
		return fmt.Errorf("bwrap: giving the call a fresh session keyring (keyctl KEYCTL_JOIN_SESSION_KEYRING): %w; if sandbash runs under a seccomp profile, it must allow keyctl", e)
	}
	return cmd.Start()
}
