package ctrbackend

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/sandbash/sandbash/backend"
)

// Calls is the bookkeeping every container session keeps: the calls
// running, whether the session has closed, and the container removals still
// under way, which Close waits for.
type Calls[P comparable] struct {
	mu     sync.Mutex
	cond   *sync.Cond // on mu; signalled when waited or pending shrinks
	closed bool
	live   map[P]struct{}
	// waited: live calls whose Wait has begun; each will Finish soon
	// after it ended, and Close waits for that, so that the removal of
	// its container is under way (pending) before Close waits for those.
	waited  map[P]struct{}
	pending int // cleanups started by Finish and not yet done
}

// signal wakes Wait; c.mu is held.
func (c *Calls[P]) signal() {
	if c.cond != nil {
		c.cond.Broadcast()
	}
}

// Add registers a running call. It reports false once the session closed.
func (c *Calls[P]) Add(p P) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	if c.live == nil {
		c.live = map[P]struct{}{}
	}
	c.live[p] = struct{}{}
	return true
}

// Closed reports whether Close was called.
func (c *Calls[P]) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Waiting records that the caller waits for p's end: Close then waits
// for p to Finish (once Close's kill ended it) as well as for its cleanup.
func (c *Calls[P]) Waiting(p P) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.live[p]; ok {
		if c.waited == nil {
			c.waited = map[P]struct{}{}
		}
		c.waited[p] = struct{}{}
	}
}

// Finish unregisters a call that ended and runs cleanup (removing its
// container) in the background; Wait waits for it.
func (c *Calls[P]) Finish(p P, cleanup func()) {
	c.mu.Lock()
	delete(c.live, p)
	delete(c.waited, p)
	c.pending++
	c.signal()
	c.mu.Unlock()
	go func() {
		cleanup()
		c.mu.Lock()
		c.pending--
		c.signal()
		c.mu.Unlock()
	}()
}

// Close marks the session closed and returns the calls still running;
// first is false when it was closed already.
func (c *Calls[P]) Close() (live []P, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, false
	}
	c.closed = true
	for p := range c.live {
		live = append(live, p)
	}
	return live, true
}

// Shutdown is a session's Close: it marks the session closed, closes its
// warm pool, kills every running call (kill returns once the call ended)
// and waits for the container removals. It reports false, after waiting,
// when the session was closed already.
func (c *Calls[P]) Shutdown(pool interface{ Close() }, kill func(P)) bool {
	live, first := c.Close()
	if first {
		pool.Close()
		for _, p := range live {
			kill(p)
		}
	}
	c.Wait()
	return first
}

// Wait waits for the calls being waited for to Finish and for the
// cleanups Finish started. (A WaitGroup would not do: a Finish may come
// while Wait waits, which WaitGroup forbids.)
func (c *Calls[P]) Wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cond == nil {
		c.cond = sync.NewCond(&c.mu)
	}
	for c.pending > 0 || len(c.waited) > 0 {
		c.cond.Wait()
	}
}

// Call is what one call leaves in-band: the scanner of its output, what its
// container wrote to stderr (the supervisor's own messages), and the last
// signal sandbash sent it.
type Call struct {
	Scan *Scanner
	diag bytes.Buffer

	mu       sync.Mutex
	signaled syscall.Signal
}

// NewCall returns the state of a call whose output goes to out and whose
// trailer carries nonce.
func NewCall(out io.Writer, nonce string) *Call {
	return &Call{Scan: NewScanner(out, nonce)}
}

// Diag is where the container's stderr goes; it keeps the first 4 KiB.
func (c *Call) Diag() io.Writer { return diagWriter{c} }

type diagWriter struct{ c *Call }

func (d diagWriter) Write(p []byte) (int, error) {
	d.c.mu.Lock()
	defer d.c.mu.Unlock()
	if room := 4<<10 - d.c.diag.Len(); room > 0 {
		d.c.diag.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Signaled records that sig was sent to the call.
func (c *Call) Signaled(sig syscall.Signal) {
	c.mu.Lock()
	c.signaled = sig
	c.mu.Unlock()
}

// ErrNotFinished wraps the errors of calls that sandbash could not see to
// their end: the engine stopped or lost the container, or the call's
// supervisor lost sandbash. The command did not exit by itself.
var ErrNotFinished = errors.New("the command did not exit by itself")

// Exit turns what the call left into how it ended: the supervisor's
// report; else, when sandbash killed it, 128+SIGKILL; else, when the engine
// says the memory limit killed the container (oomKilled, asked only then:
// under memory pressure the kernel may take the supervisor too), an OOM
// kill; else an error saying what happened to the container (lost, asked
// last: "" when the engine has nothing to say) or that the stream failed
// (streamErr) or ended without a report. engine is the backend's name.
//
// A report of a call the supervisor ended itself because of something
// other than sandbash (the engine's SIGTERM, a lost connection, the
// call killing the supervisor's helpers) is an error wrapping
// ErrNotFinished.
func (c *Call) Exit(engine string, streamErr error, oomKilled func() bool, lost func() string) (backend.Exit, error) {
	t, terr := c.Scan.Done()
	c.mu.Lock()
	sig, msg := c.signaled, string(bytes.TrimSpace(c.diag.Bytes()))
	c.mu.Unlock()
	switch {
	case terr != nil:
		return backend.Exit{}, fmt.Errorf("%s: %w (%w)", engine, terr, backend.ErrNoExitStatus)
	case t != nil:
		exit := backend.Exit{Code: t.ExitCode, OOMKilled: t.OOMKills > 0}
		switch {
		case t.Stop == StopTerm && sig == 0:
			return exit, fmt.Errorf("%s: the call's supervisor got a SIGTERM that sandbash did not send: %s stopped the call's container (shutting down or restarting, or a stop command), or a process of the call sent it; %w (exit status %d)", engine, engineName(engine), ErrNotFinished, t.ExitCode)
		case t.Stop == StopLost:
			return exit, fmt.Errorf("%s: the call's supervisor lost its connection to sandbash (through %s: it ended, or brought no heartbeat for %v, as also happens when the call stops or kills the supervisor's heartbeat relay) and ended the call; %w (exit status %d)", engine, engineName(engine), HeartbeatTimeout, ErrNotFinished, t.ExitCode)
		case t.Stop == StopUnwatched && sig == syscall.SIGKILL:
			// sandbash's own SIGKILL: where an engine sends it as a
			// kill -KILL -1 inside the container (Kubernetes), it
			// kills the supervisor's helpers too.
			return exit, nil
		case t.Stop == StopUnwatched:
			return exit, fmt.Errorf("%s: the call killed its supervisor's helpers (the processes that relay sandbash's heartbeat and wait for the command, its parent), so the supervisor ended the call, and the command's exit status is lost; %w", engine, ErrNotFinished)
		case t.Stop == StopDeadline:
			exit.TimedOut = true
		}
		return exit, nil
	}
	// No report. The root package turns a call that sandbash (or the
	// memory limit) killed into 128+SIGKILL; the rest is said as an error.
	if sig == syscall.SIGKILL {
		return backend.Exit{}, fmt.Errorf("%s: the call was killed before its supervisor reported: %w", engine, backend.ErrNoExitStatus)
	}
	if oomKilled != nil && oomKilled() {
		return backend.Exit{OOMKilled: true}, fmt.Errorf("%s: the memory limit killed the call's supervisor: %w", engine, backend.ErrNoExitStatus)
	}
	if msg != "" {
		msg = ": " + msg
	}
	if lost != nil {
		if why := lost(); why != "" {
			return backend.Exit{}, fmt.Errorf("%s: %s; %w%s (%w)", engine, why, ErrNotFinished, msg, backend.ErrNoExitStatus)
		}
	}
	if streamErr != nil {
		return backend.Exit{}, fmt.Errorf("%s: reading the call's output: %v%s (%w, %w)", engine, streamErr, msg, backend.ErrOutputIncomplete, backend.ErrNoExitStatus)
	}
	return backend.Exit{}, fmt.Errorf("%s: the call's container ended without reporting an exit status (the call may have killed its supervisor, or the container was killed from outside)%s: %w", engine, msg, backend.ErrNoExitStatus)
}

// engineName names an engine in messages.
func engineName(engine string) string {
	switch engine {
	case "docker":
		return "the Docker daemon"
	case "podman":
		return "the Podman service"
	}
	return engine
}
