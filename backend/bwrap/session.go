package bwrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/workspace"
)

type session struct {
	b      *Backend
	spec   *backend.SessionSpec
	path   string   // what runs: bwrap, or nsenter when there are caches
	prefix []string // its arguments before bwrap's own
	args   []string // bwrap's options every call shares, before /etc's
	// argsTail are those after /etc's allowlist (sandboxArgs).
	argsTail []string
	cred     *syscall.Credential
	holder   *holder // the caches' mount namespace, if any
	hostUID  int     // who the calls' processes are on the host
	// runUID and runGID are who bwrap runs as (for Backend.probe).
	runUID, runGID int
	cgroup         string // the session's cgroup directory name, "" without cgroups
	// swept is closed when the sweep of dead sandbash processes' cgroups
	// that Open started is done; nil without cgroups.
	swept chan struct{}

	mu     sync.Mutex
	closed bool
	seq    int          // the last call cgroup's number
	spare  *spareCgroup // the next call's cgroups, if being made
	live   map[*process]struct{}
}

// drainDelay bounds how long Wait waits for the output pipe to reach EOF
// after bwrap exits. Every writer died with the sandbox's PID namespace, so
// EOF is immediate; the bound only guards against the unforeseen.
const drainDelay = 5 * time.Second

// Start starts `bash -c c.Command` in a fresh sandbox.
func (s *session) Start(ctx context.Context, c *backend.Call) (backend.Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, backend.ErrClosed
	}
	if err := workspace.Verify(s.spec); err != nil {
		return nil, fmt.Errorf("bwrap: %w", err)
	}
	cg, err := s.takeCgroup()
	if err != nil {
		return nil, err
	}
	limits := &callLimits{cg: cg, rl: s.b.enf.rlimits(s.hostUID)}
	p, err := s.start(c, limits)
	if err != nil {
		limits.discard()
		return nil, err
	}
	s.live[p] = struct{}{}
	if !s.b.oneShot {
		s.prepareCgroup() // for the next call
	}
	return p, nil
}

// spareCgroup is the cgroups of a call to come, being made (or made) in
// the background: creating a call's cgroups (a directory and its limits
// per hierarchy) takes 0.1-0.4 ms that need not be the call's.
type spareCgroup struct {
	done chan struct{}
	cg   *callCgroup
	err  error
}

// prepareCgroup starts making the next call's cgroups, if the session has
// cgroups and none are being made. s.mu is held.
func (s *session) prepareCgroup() {
	if s.cgroup == "" || s.spare != nil {
		return
	}
	s.seq++
	sp := &spareCgroup{done: make(chan struct{})}
	s.spare = sp
	name := "call-" + strconv.Itoa(s.seq)
	go func() {
		defer close(sp.done)
		sp.cg, sp.err = s.b.enf.newCgroup(s.cgroup, name)
	}()
}

// takeCgroup returns the cgroups for the call starting: the spare ones if
// they were made, else new ones; nil without cgroups. s.mu is held.
func (s *session) takeCgroup() (*callCgroup, error) {
	if s.cgroup == "" {
		return nil, nil
	}
	if sp := s.spare; sp != nil {
		s.spare = nil
		<-sp.done
		if sp.err == nil {
			return sp.cg, nil
		}
	}
	s.seq++
	return s.b.enf.newCgroup(s.cgroup, "call-"+strconv.Itoa(s.seq))
}

// dropSpare removes the spare cgroups, if any. s.mu is held.
func (s *session) dropSpare() {
	if sp := s.spare; sp != nil {
		s.spare = nil
		<-sp.done
		if sp.cg != nil {
			_ = sp.cg.remove()
		}
	}
}

// start launches the call's bwrap under limits: bwrap itself, born in the
// call's cgroups; where it cannot be, a launcher that waits on its fd 3
// until sandbash has put it in them, and becomes bwrap. Nothing of the call
// runs outside them.
func (s *session) start(c *backend.Call, limits *callLimits) (*process, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outW.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		outR.Close()
		return nil, err
	}
	defer statW.Close()
	fail := func(err error) (*process, error) {
		outR.Close()
		statR.Close()
		return nil, err
	}
	var n *callNet
	if s.spec.Network == backend.NetworkOn || s.spec.Network == backend.NetworkProxy {
		if n, err = s.newCallNet(c); err != nil {
			return fail(err)
		}
	}
	var ns *os.File
	if n != nil {
		ns = n.ns
	}
	cmd, goW, err := s.startCmd(c, limits, ns, outW, statW, false)
	if errors.Is(err, errNotBorn) {
		cmd, goW, err = s.startCmd(c, limits, ns, outW, statW, true)
	}
	if err != nil {
		n.close()
		if s.b.oneShot {
			// New and Open did not probe: say so if bubblewrap cannot
			// create a sandbox here at all.
			if perr := s.b.probe(s.runUID, s.runGID); perr != nil {
				return fail(fmt.Errorf("%w: %w", perr, backend.ErrSetup))
			}
		}
		return fail(fmt.Errorf("%w: %w", err, backend.ErrSetup))
	}
	if goW != nil {
		defer goW.Close()
		err := limits.apply(cmd.Process.Pid)
		if err == nil {
			if _, werr := goW.Write([]byte("go\n")); werr != nil {
				err = fmt.Errorf("bwrap: starting the launcher: %w", werr)
			}
		}
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			n.close()
			return fail(err)
		}
	}
	p := &process{s: s, cmd: cmd, net: n, limits: limits, outR: outR, initFD: -1, outDone: make(chan struct{}), statDone: make(chan struct{})}
	out := c.Output
	if out == nil {
		out = io.Discard
	}
	go func() {
		defer close(p.outDone)
		_, _ = io.Copy(io.MultiWriter(out, &p.head), outR)
	}()
	go p.readStatus(statR)
	return p, nil
}

// errNotBorn: the call's program cannot be born in all of its cgroups.
var errNotBorn = errors.New("bwrap: the call cannot start in its cgroups")

// startCmd starts the call's program with out as its stdout and stderr and
// stat as bwrap's --json-status-fd, from the launcher thread (keyring.go),
// in network namespace ns if not nil. It is bwrap (or nsenter, which
// becomes bwrap), born in the call's cgroups, or fails with errNotBorn;
// with viaLauncher, the launcher, which waits for "go" on the pipe startCmd
// returns. The seccomp filter or any other file bwrap needs goes in with
// l.pass, its descriptor number into l.opts.
func (s *session) startCmd(c *backend.Call, limits *callLimits, ns, out, stat *os.File, viaLauncher bool) (*exec.Cmd, *os.File, error) {
	l := &launch{}
	defer l.closeFiles()
	var goW *os.File
	var goR *os.File
	if viaLauncher {
		var err error
		if goR, goW, err = os.Pipe(); err != nil {
			return nil, nil, err
		}
		defer goR.Close()
		l.lend(goR) // fd 3: the launcher's go-ahead
	}
	// start closes stat; a second startCmd passes it again.
	statFD := l.lend(stat)
	fail := func(err error) (*exec.Cmd, *os.File, error) {
		if goW != nil {
			goW.Close()
		}
		return nil, nil, err
	}
	filter, err := seccompFile()
	if err != nil {
		return fail(err)
	}
	l.opts = append(l.opts, s.args...)
	l.opts = append(l.opts, etcArgs(l, s.spec.Network, s.b.oneShot)...)
	l.opts = append(l.opts, s.argsTail...)
	l.opts = append(l.opts, "--json-status-fd", strconv.Itoa(statFD), "--seccomp", strconv.Itoa(l.pass(filter)))
	if s.spec.Network == backend.NetworkOn {
		fd, err := l.passData("sandbash-resolv.conf", []byte(resolvConf))
		if err != nil {
			return fail(err)
		}
		l.opts = append(l.opts, "--ro-bind-data", strconv.Itoa(fd), "/etc/resolv.conf")
	}
	l.opts = append(l.opts, "--remount-ro", "/")
	args, err := l.args(s.prefix, c.Command, limits.rl)
	if err != nil {
		return fail(err)
	}
	program := s.path
	if viaLauncher {
		program, args = s.b.bash, launcherArgs(program, args)
	}
	cmd := exec.Command(program, args...)
	cmd.Dir = "/"
	cmd.Env = helperEnv
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = l.files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	cg := limits.cg
	if viaLauncher && cg != nil {
		cg.born, cg = nil, nil // the launcher joins them all
	}
	if fd := cg.v2FD(); fd >= 0 {
		// A v2 cgroup takes the process as it is created (clone3).
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	// With a fresh session keyring (keyring.go).
	err = startFresh(cmd, ns, cg)
	limits.cg.closeV2FD()
	switch {
	case err != nil && cmd.SysProcAttr.UseCgroupFD && !errors.Is(err, errNotBorn):
		// Perhaps no clone3 here (a seccomp profile that refuses it).
		return fail(fmt.Errorf("%w: %w", errNotBorn, err))
	case errors.Is(err, errNotBorn):
		return fail(err)
	case err != nil && viaLauncher:
		return fail(fmt.Errorf("bwrap: starting the launcher for %s: %w", s.path, err))
	case err != nil:
		return fail(fmt.Errorf("bwrap: starting %s: %w", s.path, err))
	}
	if cmd.SysProcAttr.UseCgroupFD {
		cg.bornV2()
	}
	return cmd, goW, nil
}

// Close kills every call still running. It is idempotent.
func (s *session) Close() error {
	s.mu.Lock()
	s.closed = true
	s.dropSpare()
	live := make([]*process, 0, len(s.live))
	for p := range s.live {
		live = append(live, p)
	}
	s.mu.Unlock()
	for _, p := range live {
		_ = p.Signal(unix.SIGKILL)
	}
	if s.holder != nil {
		for _, p := range live {
			<-p.outDone
		}
		s.holder.stop()
	}
	if s.swept != nil {
		<-s.swept
	}
	if len(live) == 0 {
		return s.removeCgroup()
	}
	return nil // the last call's Wait removes the session's cgroup
}

// removeCgroup removes the session's cgroup directories, which its calls'
// have left.
func (s *session) removeCgroup() error {
	if s.cgroup == "" {
		return nil
	}
	return s.b.enf.cg.removeSession(s.cgroup)
}

// process is one bwrap invocation.
type process struct {
	s        *session
	cmd      *exec.Cmd
	net      *callNet // the call's own network namespace, nil under NetworkNone
	limits   *callLimits
	outR     *os.File
	outDone  chan struct{}
	statDone chan struct{}
	head     headBuffer // the start of the output, to quote bwrap's own errors

	mu       sync.Mutex
	exited   bool
	initFD   int // pidfd of the sandbox's init (bwrap's PID 1), or -1 before it is known
	pidNS    uint64
	exitCode *int
	signaled syscall.Signal // the last signal sent, 0 if none
	// pending is a signal asked for before bwrap said which process is
	// the sandbox's init (see Signal), and force the timer that sends it
	// to bwrap if it never does.
	pending   syscall.Signal
	force     *time.Timer
	statusEOF bool // bwrap's status stream ended
}

// pendingLimit bounds how long a signal waits for bwrap to report the
// sandbox's init: it does within milliseconds of its start.
const pendingLimit = 2 * time.Second

// status is one of the JSON documents bwrap writes to --json-status-fd.
type status struct {
	ChildPID     *int    `json:"child-pid"`
	PIDNamespace *uint64 `json:"pid-namespace"`
	ExitCode     *int    `json:"exit-code"`
}

func (p *process) readStatus(r *os.File) {
	defer close(p.statDone)
	defer r.Close()
	defer func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.statusEOF = true
		if sig := p.pending; sig != 0 && !p.exited {
			// bwrap is done without a sandbox to wait for.
			p.pending = 0
			_ = p.signal(sig)
		}
	}()
	dec := json.NewDecoder(r)
	for {
		var st status
		if err := dec.Decode(&st); err != nil {
			return
		}
		p.mu.Lock()
		if st.ChildPID != nil && p.initFD < 0 && !p.exited {
			if fd, err := unix.PidfdOpen(*st.ChildPID, 0); err == nil {
				p.initFD = fd
				p.pidNS = nsInode(*st.ChildPID)
				if st.PIDNamespace != nil {
					p.pidNS = *st.PIDNamespace
				}
			}
			if sig := p.pending; sig != 0 {
				// The init is known (or already gone): now it is safe.
				p.pending = 0
				_ = p.signal(sig)
			}
		}
		if st.ExitCode != nil {
			p.exitCode = st.ExitCode
		}
		p.mu.Unlock()
	}
}

func nsInode(pid int) uint64 {
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/pid", &st); err != nil {
		return 0
	}
	return st.Ino
}

// Signal delivers sig to every process in the sandbox. SIGKILL goes to the
// sandbox's init, which takes the whole PID namespace with it, and to bwrap.
//
// Until bwrap has said which process is the sandbox's init, the signal
// waits (at most pendingLimit): bwrap lets its child go on only after it
// said so, and a bwrap killed in between leaves that child waiting
// forever, in no namespace of sandbash's to kill it in.
func (p *process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	p.signaled = sig
	if p.initFD < 0 && !p.statusEOF {
		if p.pending != unix.SIGKILL {
			p.pending = sig
		}
		if p.force == nil {
			p.force = time.AfterFunc(pendingLimit, func() {
				p.mu.Lock()
				defer p.mu.Unlock()
				if sig := p.pending; sig != 0 && !p.exited {
					p.pending = 0
					_ = p.signal(sig)
				}
			})
		}
		return nil
	}
	return p.signal(sig)
}

// signal is Signal once the sandbox's init is known, or bwrap will not say
// it. p.mu is held.
func (p *process) signal(sig syscall.Signal) error {
	if p.initFD < 0 || sig == unix.SIGKILL {
		if sig == unix.SIGKILL {
			if p.initFD >= 0 {
				_ = unix.PidfdSendSignal(p.initFD, unix.SIGKILL, nil, 0)
			}
		}
		// Without an init (bwrap is done, or never said which), bwrap
		// itself is what there is; with --die-with-parent its death
		// takes a sandbox it made down.
		if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return nil
	}
	if err := signalNamespace(p.pidNS, sig); err != nil {
		_ = p.cmd.Process.Signal(unix.SIGKILL)
		return err
	}
	return nil
}

// errOwnNamespace guards signalNamespace: a sandbox that shared our PID
// namespace would make it signal every process on the host.
var errOwnNamespace = errors.New("bwrap: the sandbox shares sandbash's PID namespace; refusing to signal it process by process")

// signalNamespace sends sig to every process whose PID namespace has inode
// ns. Each is opened as a pidfd before its namespace is checked, so a PID
// reused in between cannot be hit.
func signalNamespace(ns uint64, sig syscall.Signal) error {
	if ns == 0 || ns == nsInode(os.Getpid()) {
		return errOwnNamespace
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if nsInode(pid) == ns {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0)
		}
		unix.Close(fd)
	}
	return nil
}

// Wait waits for bwrap to exit, which happens once the sandbox's PID
// namespace is empty, then for the output to drain.
func (p *process) Wait() (backend.Exit, error) {
	werr := p.cmd.Wait()
	// bwrap reports the command's exit as soon as the command exits, which
	// can be before the sandbox's init has died and the kernel has killed
	// the rest of its PID namespace (a nohup'd process, say). Make sure of
	// it: kill the init and wait until its pidfd says it is gone; its exit
	// completes only once every process in the namespace is dead.
	select {
	case <-p.statDone:
	case <-time.After(drainDelay):
	}
	p.mu.Lock()
	if p.initFD >= 0 {
		_ = unix.PidfdSendSignal(p.initFD, unix.SIGKILL, nil, 0)
		_, _ = unix.Poll([]unix.PollFd{{Fd: int32(p.initFD), Events: unix.POLLIN}}, int(drainDelay/time.Millisecond))
	}
	p.exited = true
	p.pending = 0
	if p.force != nil {
		p.force.Stop()
	}
	p.mu.Unlock()
	drained := true
	select {
	case <-p.outDone:
	case <-time.After(drainDelay):
		drained = false
		p.outR.Close()
		<-p.outDone
	}
	<-p.statDone
	p.outR.Close()
	p.net.close() // every process of the call is gone

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.initFD >= 0 {
		unix.Close(p.initFD)
		p.initFD = -1
	}
	// Every process of the call is gone: its cgroups can go.
	oom, cgErr := p.limits.finish()
	p.s.mu.Lock()
	delete(p.s.live, p)
	if p.s.closed && len(p.s.live) == 0 {
		cgErr = errors.Join(cgErr, p.s.removeCgroup())
	}
	p.s.mu.Unlock()

	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return backend.Exit{}, fmt.Errorf("bwrap: waiting for the sandbox: %w", werr)
	}
	if p.exitCode == nil {
		// bwrap reported no exit status. It does once the command was
		// started, so either bwrap itself was killed first (by the
		// memory limit, by sandbash's signal, from outside), or it failed
		// to set up the sandbox, and what it printed says why.
		ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !oom && p.signaled == 0 && !ws.Signaled() {
			if p.s.b.oneShot {
				// New and Open did not probe: say so if bubblewrap
				// cannot create a sandbox here at all.
				if err := p.s.b.probe(p.s.runUID, p.s.runGID); err != nil {
					return backend.Exit{}, errors.Join(fmt.Errorf("%w: %w", err, backend.ErrSetup), cgErr)
				}
			}
			return backend.Exit{}, errors.Join(fmt.Errorf("bwrap: could not set up the sandbox: %s: %w", bytes.TrimSpace(p.head.Bytes()), backend.ErrSetup), cgErr)
		}
		how := "was killed"
		if ws.Signaled() {
			how += " by " + unix.SignalName(ws.Signal())
		}
		if oom {
			how += " (the call's memory limit was reached)"
		}
		return backend.Exit{OOMKilled: oom}, errors.Join(fmt.Errorf("bwrap: bwrap %s before it reported the command's exit status: %w", how, backend.ErrNoExitStatus), cgErr)
	}
	exit := backend.Exit{Code: *p.exitCode, OOMKilled: oom}
	if !drained {
		return exit, errors.Join(fmt.Errorf("bwrap: the sandbox exited but its output stayed open %v longer: %w", drainDelay, backend.ErrOutputIncomplete), cgErr)
	}
	return exit, cgErr
}

// headBuffer keeps the first bytes written to it.
type headBuffer struct{ bytes.Buffer }

const headMax = 4 << 10

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := headMax - h.Len(); room > 0 {
		h.Buffer.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
