package ctrbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/owner"
	"github.com/sandbash/sandbash/workspace"
)

// cleanupTimeout bounds engine requests made while cleaning up, which run
// without the caller's context.
const cleanupTimeout = 30 * time.Second

// Backend is a container backend: sessions whose every call runs in a
// fresh container of an [Engine], kept warm in a small per-session pool.
// It is safe for concurrent use.
type Backend struct {
	engine Engine
	cfg    Config
	growth *Budget // how far its sessions' pools grow, together
	later  *Later  // holds removals back while its sessions prepare containers
}

// NewBackend returns the backend that runs calls on e, configured by cfg
// (see [NewConfig]).
func NewBackend(e Engine, cfg Config) *Backend {
	return &Backend{engine: e, cfg: cfg, growth: NewBudget(PoolSurplus), later: NewLater(LaterMax, LaterDelay)}
}

// Config is the configuration the backend was made with.
func (b *Backend) Config() Config { return b.cfg }

// Name returns the engine's name.
func (b *Backend) Name() string { return b.engine.Name() }

// Open checks the image and the mounts, creates the session's cache
// volumes and starts filling its warm pool.
func (b *Backend) Open(ctx context.Context, sp *backend.SessionSpec) (backend.Session, error) {
	name := b.engine.Name()
	if sp.Image == "" {
		return nil, fmt.Errorf("%s: no image configured (Config.Image is empty): %w: %w", name, backend.ErrNoImage, backend.ErrSetup)
	}
	if err := workspace.CheckSpec(sp); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := CheckEnv(sp.Env); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := checkProxy(name, sp, b.cfg); err != nil {
		return nil, err
	}
	img, err := b.ensureImage(ctx, sp.Image)
	if err != nil {
		return nil, err
	}
	spec := &Spec{SessionSpec: sp, Image: img, Env: SupervisorEnv(), Command: Command(), Limits: b.cfg.Limits, Runtime: b.cfg.Runtime}
	spec.LocalDir = sp.Dir
	if spec.SessionSpec, err = engineSpec(sp, b.cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for i := range sp.Overlays {
		spec.Volumes = append(spec.Volumes, Volume{Name: fmt.Sprintf("sandbash-%s-cache%d", sp.ID, i), Overlay: spec.Overlays[i]})
	}
	// A one-shot session (nothing kept warm) leaves the removal of its
	// container to the engine where it can (AutoRemover), as docker run
	// --rm does, so that it ends once its call did; with cache volumes it
	// must wait, to remove them.
	ar, ok := b.engine.(AutoRemover)
	spec.AutoRemove = b.cfg.PoolSize == 0 && len(spec.Volumes) == 0 && ok && ar.AutoRemoves()
	// Inside a container (cfg.HostPaths) the engine would need the
	// channels' host path, and the FIFOs are made here: the attach
	// stream carries the output there.
	if le, ok := b.engine.(LocalEngine); ok && le.Local() && sp.Dir != "" && b.cfg.HostPaths == nil {
		// What an earlier open of the session left (a run that was
		// killed) goes: a session's opens are serialised.
		spec.Channels = filepath.Join(sp.Dir, "channels")
		_ = os.RemoveAll(spec.Channels)
		if err := os.Mkdir(spec.Channels, 0o711); err != nil {
			return nil, fmt.Errorf("%s: creating the session's output channels: %w", name, err)
		}
	}
	s := &session{e: b.engine, spec: sp, callEnv: CallEnv(sp.Env, img.Env), autoRemove: spec.AutoRemove, channels: spec.Channels, tag: NewNonce()[:8], later: b.later}
	if s.create, err = b.engine.Template(spec); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := s.createVolumes(ctx, spec.Volumes); err != nil {
		s.removeVolumes()
		return nil, err
	}
	s.pool = NewPool(b.cfg.PoolSize, func(ctx context.Context) (*warm, error) {
		defer b.later.Busy()()
		return s.prepare(ctx)
	}, s.discard)
	s.pool.Grow(PoolMax, PoolIdle, b.growth)
	return s, nil
}

// A session's warm pool grows while calls come back to back (each call
// that finds no container ready doubles its target), up to PoolMax
// containers ready or starting, and falls back to the configured size
// after PoolIdle with no call (see [Pool]). All the sessions of a backend
// grow by PoolSurplus containers at most, together. A pool of size 0 or of
// PoolMax or more never grows.
const (
	PoolMax     = 4
	PoolIdle    = 10 * time.Second
	PoolSurplus = 4
)

// The containers of calls that ended by themselves are removed once the
// backend prepares no container, or after LaterDelay; at most LaterMax
// wait (see [Later]).
const (
	LaterMax   = 32
	LaterDelay = 10 * time.Second
)

// ensureImage pulls the image if it is not present, with progress, and
// returns what it is now.
func (b *Backend) ensureImage(ctx context.Context, ref string) (Image, error) {
	name := b.engine.Name()
	img, found, err := b.engine.Image(ctx, ref)
	if err != nil {
		return Image{}, fmt.Errorf("%s: inspecting image %s: %w", name, ref, err)
	}
	if found {
		return img, nil
	}
	fmt.Fprintf(b.cfg.Progress, "sandbash: image %s is not on this machine; pulling it\n", ref)
	err = b.engine.Pull(ctx, ref, b.cfg.Progress)
	if err == nil {
		img, found, err = b.engine.Image(ctx, ref)
		if err == nil && !found {
			err = errors.New("the image is still missing after the pull")
		}
	}
	if err != nil {
		return Image{}, fmt.Errorf("%s: image %s is not on this machine and pulling it failed: %v. Load or build it first (for sandbash's test images: make images), or use another: %w: %w", name, ref, err, backend.ErrNoImage, backend.ErrSetup)
	}
	return img, nil
}

// HasImage reports whether image is on this machine. It never pulls: the
// CLI uses it to refuse an image that only workspace content names, which
// Open would otherwise pull.
func (b *Backend) HasImage(ctx context.Context, image string) (bool, error) {
	_, found, err := b.engine.Image(ctx, image)
	if err != nil {
		return false, fmt.Errorf("%s: inspecting image %s: %w", b.engine.Name(), image, err)
	}
	return found, nil
}

// GC removes every sandbash-labelled container and volume whose owning
// process has exited (a sandbash killed mid-call, say) and ran as this
// process's uid, or any uid's with all. Objects of live owners, of owners
// out of sight (another host or PID namespace) and of other users are left
// alone. It returns what it removed, as "container <id>" and "volume
// <name>"; what it reports removed is gone.
func (b *Backend) GC(ctx context.Context, all bool) ([]string, error) {
	name := b.engine.Name()
	var removed []string
	var errs []error
	for _, k := range []struct {
		kind   Kind
		remove func(context.Context, string) error
		short  func(string) string
	}{
		{KindContainer, b.engine.Remove, func(id string) string { return fmt.Sprintf("%.12s", id) }},
		{KindVolume, b.engine.RemoveVolume, func(n string) string { return n }},
	} {
		list, err := b.engine.List(ctx, k.kind, LabelSession)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: listing sandbash %ss: %w", name, k.kind, err))
			if k.kind == KindContainer {
				return nil, errors.Join(errs...)
			}
			break
		}
		for _, o := range list {
			if !owner.Collectable(o.Labels[LabelOwner], all) {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
			err := k.remove(rctx, o.ID)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: removing %s %s: %w", name, k.kind, k.short(o.ID), err))
				continue
			}
			removed = append(removed, string(k.kind)+" "+k.short(o.ID))
		}
	}
	return removed, errors.Join(errs...)
}

type session struct {
	e       Engine
	spec    *backend.SessionSpec
	create  CreateFunc
	volumes []string // cache volumes created, removed at Close
	callEnv []string // the calls' environment (CallEnv)
	pool    *Pool[*warm]
	seq     atomic.Int64
	// tag sets this session's container names apart from those of
	// earlier opens of the same session (a CLI session's runs, whose
	// containers the engine may still be removing).
	tag string
	// autoRemove: the engine removes each container once it exited
	// (Spec.AutoRemove).
	autoRemove bool
	// channels is Spec.Channels: "" when the output goes through the
	// engine's attach stream.
	channels string
	// later holds back the removal of containers whose calls ended by
	// themselves (the backend's); owner is this session's part there.
	later *Later
	owner LaterOwner

	calls Calls[*process]
}

// createVolumes makes the session's cache volumes. The engine mounts each
// once, however many of the session's containers use it, so the session's
// upper layer never has two live mounts.
func (s *session) createVolumes(ctx context.Context, vs []Volume) error {
	for _, v := range vs {
		if err := s.e.CreateVolume(ctx, v, Labels(s.spec.ID)); err != nil {
			return fmt.Errorf("%s: creating the %s cache volume: %w", s.e.Name(), v.Overlay.Name, err)
		}
		s.volumes = append(s.volumes, v.Name)
	}
	return nil
}

func (s *session) removeVolumes() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, v := range s.volumes {
		_ = s.e.RemoveVolume(ctx, v)
	}
}

// warm is a started container waiting for its one call, with the attach
// stream that will carry the call.
type warm struct {
	id        string
	st        Stream
	out, diag *switchWriter
	proxy     net.Listener // under NetworkProxy, in the container's namespace
	// ch is the read end of the container's output channel, a FIFO whose
	// name is gone by the time the call starts; nil when the output comes
	// through the attach stream.
	ch    *os.File
	chDir string // the channel's directory on the host, "" if none
}

// openChannel makes the output channel of container cname: a FIFO alone in
// a directory of its own that the engine binds into that container only,
// both the container user's, and opens its read end. The supervisor opens
// the write end before it says it is ready; prepare then removes the
// FIFO's name, so nothing that starts later (the call's command) can open
// it: only the supervisor and what it hands the descriptor to write to it.
// The directory is mode 0700 inside the session's 0711 channels directory.
func (s *session) openChannel(cname string) (dir string, r *os.File, err error) {
	dir = filepath.Join(s.channels, cname)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, err
	}
	fail := func(err error) (string, *os.File, error) {
		os.RemoveAll(dir)
		return "", nil, err
	}
	fifo := filepath.Join(dir, "out")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return fail(err)
	}
	for _, p := range []string{fifo, dir} {
		if err := os.Lchown(p, s.spec.UID, s.spec.GID); err != nil {
			return fail(err)
		}
	}
	// Opened before the supervisor's end, so that its open does not
	// block; read only once the supervisor has it open (a FIFO without a
	// writer reads as at its end).
	if r, err = os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err != nil {
		return fail(err)
	}
	// A larger buffer than the default 64 KiB: fewer wake-ups per byte.
	// Best effort (an unprivileged process may be capped lower).
	_, _ = unix.FcntlInt(r.Fd(), unix.F_SETPIPE_SZ, channelBuffer)
	return dir, r, nil
}

// closeChannel closes w's channel and removes its directory.
func (w *warm) closeChannel() {
	if w.ch != nil {
		w.ch.Close()
	}
	if w.chDir != "" {
		os.RemoveAll(w.chDir)
	}
}

// prepare creates one container, starts it attached and waits for its
// supervisor.
//
// It does not let Close cancel it half-way: a create whose request is
// cancelled can still complete in the engine, leaving a container nobody
// knows of. It finishes (bounded by cleanupTimeout, or the engine's
// StartTimeout: see SlowStarter) and the pool discards
// what arrives after Close.
func (s *session) prepare(ctx context.Context) (*warm, error) {
	limit := cleanupTimeout
	if ss, ok := s.e.(SlowStarter); ok {
		limit = ss.StartTimeout()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), limit)
	defer cancel()
	name := s.e.Name()
	if err := workspace.Verify(s.spec); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cname := fmt.Sprintf("sandbash-%s-%s-%d", s.spec.ID, s.tag, s.seq.Add(1))
	w := &warm{out: &switchWriter{}, diag: &switchWriter{}}
	if s.channels != "" {
		var err error
		if w.chDir, w.ch, err = s.openChannel(cname); err != nil {
			return nil, fmt.Errorf("%s: creating the output channel of a container: %w", name, err)
		}
	}
	id, err := s.create(ctx, cname)
	if err != nil {
		s.remove(cname)
		w.closeChannel()
		return nil, fmt.Errorf("%s: creating a container from %s: %w", name, s.spec.Image, err)
	}
	w.id = id
	// Warm means the supervisor waits for its call, not merely started.
	pr, pw := io.Pipe()
	w.diag.set(lenient{pw})
	up := make(chan error, 1)
	var channel bool
	go func() {
		var err error
		channel, err = WaitReady(pr)
		w.diag.set(nil)
		pr.CloseWithError(io.EOF) // unblock a write in flight
		up <- err
	}()
	if w.st, err = s.e.Run(ctx, id, w.out, w.diag); err != nil {
		pw.Close()
		<-up
		s.remove(id)
		w.closeChannel()
		return nil, fmt.Errorf("%s: starting a container from %s: %w", name, s.spec.Image, err)
	}
	select {
	case err = <-up:
	case <-w.st.Done():
		pw.Close()
		if err = <-up; err == nil {
			err = fmt.Errorf("the container ended before its supervisor started: %v", w.st.Err())
		}
	case <-ctx.Done():
		pw.Close()
		<-up
		err = ctx.Err()
	}
	switch {
	case err != nil:
	case channel && w.ch == nil:
		err = errors.New("the call supervisor says it writes to an output channel sandbash did not offer")
	case channel:
		// The supervisor holds the FIFO open: its name can go.
		err = os.Remove(filepath.Join(w.chDir, "out"))
	case w.ch != nil:
		// The supervisor could not open the FIFO (the engine maps the
		// container's users, say): the attach stream carries the output.
		w.ch.Close()
		w.ch = nil
	}
	if err != nil {
		s.discard(w)
		return nil, fmt.Errorf("%s: image %s: %w", name, s.spec.Image, err)
	}
	if s.spec.Network == backend.NetworkProxy {
		if w.proxy, err = listenIn(ctx, s.e, id); err != nil {
			s.discard(w)
			return nil, fmt.Errorf("%s: giving container %.12s the egress proxy: %w", name, id, err)
		}
	}
	return w, nil
}

// lenient is a writer whose failures are its own: the stream that feeds it
// goes on.
type lenient struct{ w io.Writer }

func (l lenient) Write(p []byte) (int, error) {
	_, _ = l.w.Write(p)
	return len(p), nil
}

// discard releases a container: it ends its stdin, removes it, and ends its
// attach stream.
func (s *session) discard(w *warm) {
	if w.proxy != nil {
		w.proxy.Close()
	}
	_ = w.st.CloseStdin()
	s.remove(w.id)
	w.st.Close()
	w.closeChannel()
}

// remove removes a container. Anything that fails here is left for
// `sandbash gc`, which finds it by its labels.
func (s *session) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = s.e.Remove(ctx, id)
}

// Start hands the command to a warm container.
func (s *session) Start(ctx context.Context, c *backend.Call) (backend.Process, error) {
	if s.calls.Closed() {
		return nil, backend.ErrClosed
	}
	if s.spec.Network == backend.NetworkProxy && c.Proxy == nil {
		return nil, fmt.Errorf("%s: the session's network is the egress proxy, but the call has none to serve", s.e.Name())
	}
	w, err := s.pool.Get(ctx)
	if err != nil {
		if errors.Is(err, ErrPoolClosed) {
			return nil, backend.ErrClosed
		}
		return nil, err
	}
	nonce := NewNonce()
	p := &process{s: s, w: w, Call: NewCall(c.Output, nonce), done: make(chan struct{})}
	// Registered before the handover, so that Close ends a call it raced.
	if !s.calls.Add(p) {
		s.discard(w)
		return nil, backend.ErrClosed
	}
	w.diag.set(p.Diag())
	if w.ch != nil {
		// Nothing of the call comes through the attach stream's stdout.
		p.pumped = make(chan struct{})
		go p.pump()
	} else {
		w.out.set(p)
	}
	go p.watch()
	if w.proxy != nil && c.Proxy != nil {
		c.Proxy(w.proxy)
	}
	if _, err := w.st.Write(Handover(nonce, c.Command, s.callEnv, c.Deadline, c.KillGrace)); err != nil {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		s.calls.Finish(p, p.release)
		return nil, fmt.Errorf("%s: handing the command to container %.12s: %w", s.e.Name(), w.id, err)
	}
	// The container's stdin stays open while the call runs, with a
	// heartbeat on it: when sandbash dies, or the engine's connection goes
	// away, the engine closes it, and the supervisor ends the call.
	go Heartbeat(w.st, p.done)
	return p, nil
}

// WaitWarm waits until the session's pool is full: the next call is warm.
func (s *session) WaitWarm(ctx context.Context) error { return s.pool.WaitFull(ctx) }

// Close kills running calls and removes every container of the session.
func (s *session) Close() error {
	// Removals held back go now, and those of calls that end meanwhile
	// at once: Shutdown waits for them.
	s.later.Hurry(&s.owner)
	if s.calls.Shutdown(s.pool, func(p *process) {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
	}) {
		s.removeVolumes()
	}
	return nil
}

type process struct {
	*Call
	s    *session
	w    *warm
	done chan struct{} // closed at the trailer or the stream's end
	once sync.Once
	serr error // the stream's end, when it ended before the trailer

	pumped chan struct{} // closed when pump returned; nil without a channel
	perr   error         // why pump stopped before the trailer, nil at EOF
}

// channelDrain bounds how long the output channel is read after the
// container ended without a trailer: every writer in it is gone, so the
// channel ends at once, unless a descriptor was passed to another
// container.
const channelDrain = 2 * time.Second

// channelBuffer is the size asked for an output channel's pipe buffer.
const channelBuffer = 1 << 20

// pump reads the call's output channel until the trailer, its end, or an
// error.
func (p *process) pump() {
	defer close(p.pumped)
	buf := make([]byte, 256<<10)
	for {
		n, err := p.w.ch.Read(buf)
		if n > 0 {
			_, _ = p.Write(buf[:n])
			if t, _ := p.Scan.Done(); t != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				p.perr = err
			}
			return
		}
	}
}

// Write receives the container's stdout from the attach stream.
func (p *process) Write(b []byte) (int, error) {
	n, err := p.Scan.Write(b)
	if t, _ := p.Scan.Done(); t != nil {
		// The call is over: the heartbeat stops. Its stdin stays open
		// until release ends it, so that the container's exit (and with
		// Podman, the cleanup process conmon starts then) waits with its
		// removal (see release).
		p.once.Do(func() { close(p.done) })
	}
	return n, err
}

// watch ends the call if the stream (the attach stream, or the output
// channel) ends without a trailer.
func (p *process) watch() {
	var err error
	select {
	case <-p.done:
		return
	case <-p.pumped: // the channel ended without a trailer
		err = p.perr
	case <-p.w.st.Done():
		err = p.w.st.Err()
		if p.w.ch != nil {
			// The container is gone; read what it left in the channel.
			_ = p.w.ch.SetReadDeadline(time.Now().Add(channelDrain))
			<-p.pumped
			if err == nil {
				err = p.perr
			}
		}
	}
	p.once.Do(func() {
		p.serr = err
		p.Scan.Flush()
		close(p.done)
	})
}

// Signal sends sig to the container's PID 1, the supervisor, which passes
// SIGTERM on to every process of the call. SIGKILL ends the container.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.Signaled(sig)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := p.s.e.Kill(ctx, p.w.id, sig); err != nil {
		return fmt.Errorf("%s: signalling container %.12s: %w", p.s.e.Name(), p.w.id, err)
	}
	return nil
}

// Wait waits for the trailer (or the end of the stream) and removes the
// container in the background; the session's Close waits for that.
func (p *process) Wait() (backend.Exit, error) {
	p.s.calls.Waiting(p)
	<-p.done
	exit, err := p.Exit(p.s.e.Name(), p.serr, p.oomKilled, p.lost)
	p.s.calls.Finish(p, p.release)
	return exit, err
}

// release detaches the call from its container's stream and discards the
// container. A container whose supervisor reported that its command ended
// by itself is not killed: the supervisor, the container's PID 1, killed
// every other process of the container before it reported, and exits once
// its stdin ends, which ends the container, or after 3 s with no
// heartbeat (see [Handover]). The engine then removes it if it removes
// containers by itself (autoRemove), and its stdin is closed here; else
// its exit and removal wait while the backend prepares containers (see
// [Later]): on Podman, a container's exit costs as much CPU as its start
// (conmon runs a podman process to clean it up), and back-to-back calls
// took 0.30-0.35x of podman run --rm with it held, 0.50-0.61x without.
// Any other container is removed at once.
//
// This trusts PID 1 to exit. A command cannot keep it alive: PID 1 is the
// supervisor itself, non-dumpable (a process of the same uid can neither
// ptrace it nor write its /proc/1/mem), and ignores every signal from
// inside the container but those it handles (see [Spec]: no engine init).
func (p *process) release() {
	p.w.out.set(nil)
	p.w.diag.set(nil)
	if t, _ := p.Scan.Done(); t != nil && t.Stop == "" {
		if p.w.proxy != nil {
			p.w.proxy.Close()
		}
		p.w.closeChannel()
		if p.s.autoRemove {
			_ = p.w.st.CloseStdin()
			p.w.st.Close()
			return
		}
		p.s.later.Do(&p.s.owner, func() {
			_ = p.w.st.CloseStdin()
			select {
			case <-p.w.st.Done():
			case <-time.After(exitWait):
			}
			p.w.st.Close()
			p.s.remove(p.w.id)
		})
		return
	}
	p.s.discard(p.w)
}

// exitWait bounds how long a held removal waits for its container to end
// once its stdin closed, before it removes it by force.
const exitWait = 2 * time.Second

// oomKilled asks the engine whether the memory limit killed the container.
func (p *process) oomKilled() bool {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	oom, err := p.s.e.OOMKilled(ctx, p.w.id)
	return err == nil && oom
}

// lost says what became of the call's container when its stream ended
// without a report: the engine out of reach, or the container gone. It is
// "" when the engine answers and still has the container.
func (p *process) lost() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	name := engineName(p.s.e.Name())
	switch ok, err := p.s.e.Exists(ctx, p.w.id); {
	case err != nil:
		return fmt.Sprintf("lost the connection to %s mid-call (%v); it stopped or restarted", name, err)
	case !ok && !p.s.autoRemove: // else the engine removed it when it exited
		return name + " removed the call's container mid-call"
	}
	return ""
}

// switchWriter forwards to a writer set later; before that, and after it is
// cleared, writes are dropped.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	w := s.w
	s.mu.Unlock()
	if w == nil {
		return len(b), nil
	}
	return w.Write(b)
}
