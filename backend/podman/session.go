//go:build containers_image_openpgp

package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/volumes"
	entitiesTypes "github.com/containers/podman/v5/pkg/domain/entities/types"
	"github.com/containers/podman/v5/pkg/errorhandling"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// cleanupTimeout bounds service requests made while cleaning up.
const cleanupTimeout = 30 * time.Second

// Open checks the image and the mounts and starts the session's warm pool.
func (b *Backend) Open(ctx context.Context, sp *backend.SessionSpec) (backend.Session, error) {
	if sp.Image == "" {
		return nil, fmt.Errorf("podman: no image configured; give one with --image, SANDBASH_IMAGE, or \"image\" in .devcontainer/devcontainer.json: %w", backend.ErrSetup)
	}
	if err := workspace.CheckSpec(sp); err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	if err := shared.CheckEnv(sp.Env); err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	imageEnv, err := b.ensureImage(ctx, sp.Image)
	if err != nil {
		return nil, err
	}
	s := &session{b: b, spec: sp, callEnv: shared.CallEnv(sp.Env, imageEnv)}
	if s.seccomp, err = writeProfile(sp.Dir); err != nil {
		return nil, err
	}
	if err := s.createVolumes(ctx); err != nil {
		s.removeVolumes()
		return nil, err
	}
	s.pool = shared.NewPool(b.poolSize, s.prepare, s.discard)
	return s, nil
}

// createVolumes makes one local-driver overlay volume per cache: Podman
// mounts it once for all the session's containers, so the session's upper
// layer never has two live mounts (per-container overlay volumes would).
func (s *session) createVolumes(ctx context.Context) error {
	c, cancel := s.b.with(ctx)
	defer cancel()
	for i, o := range s.spec.Overlays {
		name := fmt.Sprintf("sandbash-%s-cache%d", s.spec.ID, i)
		_, err := volumes.Create(c, entitiesTypes.VolumeCreateOptions{
			Name:    name,
			Driver:  "local",
			Options: map[string]string{"type": "overlay", "device": "overlay", "o": overlay.Options(o)},
			Labels:  shared.Labels(s.spec.ID),
		}, nil)
		if err != nil {
			return fmt.Errorf("podman: creating the %s cache volume: %w", o.Name, err)
		}
		s.volumes = append(s.volumes, name)
	}
	return nil
}

func (s *session) removeVolumes() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c, ccancel := s.b.with(ctx)
	defer ccancel()
	for _, v := range s.volumes {
		_ = volumes.Remove(c, v, new(volumes.RemoveOptions).WithForce(true))
	}
}

// ensureImage pulls the image if it is not present, and returns the
// environment its config sets.
func (b *Backend) ensureImage(ctx context.Context, image string) ([]string, error) {
	c, cancel := b.with(ctx)
	defer cancel()
	ok, err := images.Exists(c, image, nil)
	if err != nil {
		return nil, fmt.Errorf("podman: looking for image %s: %w", image, err)
	}
	if !ok {
		fmt.Fprintf(b.progress, "sandbash: image %s is not on this machine; pulling it\n", image)
		if _, err := images.Pull(c, image, new(images.PullOptions).WithProgressWriter(b.progress)); err != nil {
			return nil, fmt.Errorf("podman: image %s is not on this machine and pulling it failed: %v. Load or build it first (for sandbash's test images: make images), or give another with --image: %w", image, err, backend.ErrSetup)
		}
	}
	img, err := images.GetImage(c, image, nil)
	if err != nil {
		return nil, fmt.Errorf("podman: inspecting image %s: %w", image, err)
	}
	if img.ImageData == nil || img.Config == nil {
		return nil, nil
	}
	return img.Config.Env, nil
}

// specFor is the container spec of one call's container.
func (s *session) specFor(name string) *specgen.SpecGenerator {
	sp, l := s.spec, s.b.limits
	g := specgen.NewSpecGenerator(sp.Image, false)
	g.Name = name
	g.Entrypoint = []string{}
	g.Command = shared.Command()
	// The container's own environment is the supervisor's: nothing from
	// the image or containers.conf. The call's goes with the command.
	no, yes := false, true
	g.UnsetEnvAll = &yes
	g.Env = map[string]string{}
	for _, e := range shared.SupervisorEnv() {
		k, v, _ := strings.Cut(e, "=")
		g.Env[k] = v
	}
	// Keep no copy of the output: the attach stream carries it.
	g.LogConfiguration = &specgen.LogConfig{Driver: "none"}
	g.HTTPProxy = &no
	g.WorkDir = sp.Workspace
	g.User = fmt.Sprintf("%d:%d", sp.UID, sp.GID)
	g.Hostname = "sandbash"
	g.Labels = shared.Labels(sp.ID)
	g.Stdin = &yes
	g.Terminal = &no
	g.CapDrop = []string{"ALL"}
	g.NoNewPrivileges = &yes
	g.SeccompProfilePath = s.seccomp
	g.ReadOnlyFilesystem = &yes
	g.ReadWriteTmpfs = &no
	g.Init = &yes
	g.IpcNS = specgen.Namespace{NSMode: specgen.Private}
	g.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	if sp.Network == backend.NetworkOn {
		g.NetNS = specgen.Namespace{NSMode: specgen.Bridge}
	}
	bind := func(src, dst string, ro bool) spec.Mount {
		opt := "rw"
		if ro {
			opt = "ro"
		}
		return spec.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", opt, "nosuid"}}
	}
	g.Mounts = []spec.Mount{
		bind(sp.TmpDir, "/tmp", false),
		bind(sp.HomeDir, backend.Home, false),
		// Podman 4.3 takes no uid=/gid= for a tmpfs: make it sticky and
		// open; the container has one user.
		{Type: "tmpfs", Source: "tmpfs", Destination: shared.SupervisorDir, Options: []string{
			"rw", "exec", "nosuid", "nodev", "size=16m", "mode=1777",
		}},
	}
	for _, m := range sp.Mounts {
		g.Mounts = append(g.Mounts, bind(m.Source, m.Target, m.ReadOnly))
	}
	for i, v := range s.volumes {
		g.Volumes = append(g.Volumes, &specgen.NamedVolume{Name: v, Dest: sp.Overlays[i].Target, Options: []string{"rw", "nosuid"}})
	}
	mem, period := l.Memory, uint64(100000)
	quota := int64(l.CPUs * float64(period))
	g.ResourceLimits = &spec.LinuxResources{
		Memory: &spec.LinuxMemory{Limit: &mem, Swap: &mem},
		CPU:    &spec.LinuxCPU{Quota: &quota, Period: &period},
		Pids:   &spec.LinuxPids{Limit: l.Pids},
	}
	// Podman fails to start any container here unless these are explicit.
	g.Rlimits = []spec.POSIXRlimit{
		{Type: "nofile", Hard: uint64(l.NoFile), Soft: uint64(l.NoFile)},
		{Type: "nproc", Hard: uint64(l.NProc), Soft: uint64(l.NProc)},
	}
	if l.FileSize > 0 {
		// The largest file a call may write: bounds what one file in the
		// session's /tmp or HOME (host directories) can take.
		g.Rlimits = append(g.Rlimits, spec.POSIXRlimit{Type: "fsize", Hard: uint64(l.FileSize), Soft: uint64(l.FileSize)})
	}
	return g
}

type session struct {
	b       *Backend
	spec    *backend.SessionSpec
	pool    *shared.Pool[*warm]
	seq     atomic.Int64
	volumes []string // cache volumes, removed at Close
	callEnv []string // the calls' environment (shared.CallEnv)
	seccomp string   // the seccomp profile's path (in the session's directory)

	calls shared.Calls[*process]
}

// warm is a started container waiting for its one call, with the attach
// stream that will carry the call.
type warm struct {
	id       string
	stdin    *io.PipeWriter
	out      *switchWriter
	diag     *switchWriter
	attached chan error // receives Attach's result when the stream ends
	cancel   context.CancelFunc
}

// prepare creates a container, attaches to it and starts it. Like the
// Docker backend's, it is not cancelled half-way (see there); the pool
// discards what arrives after Close.
func (s *session) prepare(ctx context.Context) (*warm, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	c, ccancel := s.b.with(ctx)
	defer ccancel()
	if err := workspace.Verify(s.spec); err != nil {
		return nil, fmt.Errorf("podman: %w", err)
	}
	name := fmt.Sprintf("sandbash-%s-%d", s.spec.ID, s.seq.Add(1))
	created, err := containers.CreateWithSpec(c, s.specFor(name), nil)
	if err != nil {
		s.remove(name)
		return nil, fmt.Errorf("podman: creating a container from %s: %w", s.spec.Image, err)
	}
	// The bindings' Attach rewrites its connection's HTTP transport to
	// capture the socket ("one giant race condition", says its source):
	// each attach gets a connection of its own.
	aconn, err := bindings.NewConnection(ctx, s.b.uri)
	if err != nil {
		s.remove(created.ID)
		return nil, fmt.Errorf("podman: connecting to attach to container %.12s: %w", created.ID, err)
	}
	stdinR, stdinW := io.Pipe()
	actx, acancel := context.WithCancel(context.WithoutCancel(aconn))
	w := &warm{id: created.ID, stdin: stdinW, out: &switchWriter{}, diag: &switchWriter{}, attached: make(chan error, 1), cancel: acancel}
	ready := make(chan bool, 1)
	go func() {
		w.attached <- containers.Attach(actx, w.id, stdinR, w.out, w.diag, ready, new(containers.AttachOptions).WithStream(true))
	}()
	select {
	case <-ready:
	case err := <-w.attached:
		w.attached <- err
		s.discard(w)
		return nil, fmt.Errorf("podman: attaching to container %.12s: %v", w.id, err)
	case <-ctx.Done():
		s.discard(w)
		return nil, fmt.Errorf("podman: attaching to container %.12s: %w", w.id, ctx.Err())
	}
	// Warm means the supervisor waits for its call, not merely started.
	pr, pw := io.Pipe()
	w.diag.set(pw)
	up := make(chan error, 1)
	go func() {
		err := shared.WaitReady(pr)
		w.diag.set(nil)
		pr.CloseWithError(io.EOF) // unblock a write in flight
		up <- err
	}()
	if err := containers.Start(c, w.id, nil); err != nil {
		pw.Close()
		<-up
		s.discard(w)
		return nil, fmt.Errorf("podman: starting a container from %s: %w", s.spec.Image, err)
	}
	var err2 error
	select {
	case err2 = <-up:
	case aerr := <-w.attached:
		w.attached <- aerr
		pw.Close()
		err2 = <-up
		if err2 == nil {
			err2 = fmt.Errorf("the container ended before its supervisor started: %v", aerr)
		}
	case <-ctx.Done():
		pw.Close()
		<-up
		err2 = ctx.Err()
	}
	if err2 != nil {
		s.discard(w)
		return nil, fmt.Errorf("podman: image %s: %w", s.spec.Image, err2)
	}
	return w, nil
}

// discard removes a container and ends its attach stream.
func (s *session) discard(w *warm) {
	w.stdin.Close()
	s.remove(w.id)
	w.cancel()
	<-w.attached
}

func (s *session) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c, ccancel := s.b.with(ctx)
	defer ccancel()
	// Podman 4.3 refuses a forced removal while a container is between
	// stopped and exited ("container state improper"): try until it is
	// gone, so that what Close reports removed is removed.
	for c.Err() == nil {
		_, _ = containers.Remove(c, id, new(containers.RemoveOptions).WithForce(true).WithIgnore(true).WithVolumes(true).WithTimeout(0))
		if ok, err := containers.Exists(c, id, nil); err != nil || !ok {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Start hands the command to a warm container.
func (s *session) Start(ctx context.Context, call *backend.Call) (backend.Process, error) {
	if s.calls.Closed() {
		return nil, backend.ErrClosed
	}
	w, err := s.pool.Get(ctx)
	if err != nil {
		if errors.Is(err, shared.ErrPoolClosed) {
			return nil, backend.ErrClosed
		}
		return nil, err
	}
	nonce := shared.NewNonce()
	p := &process{s: s, w: w, Call: shared.NewCall(call.Output, nonce), done: make(chan struct{})}
	w.diag.set(p.Diag())
	w.out.set(p)
	if !s.calls.Add(p) {
		s.discard(w)
		return nil, backend.ErrClosed
	}
	go p.watch()
	if _, err := w.stdin.Write(shared.Handover(nonce, call.Command, s.callEnv, call.Deadline, call.KillGrace)); err != nil {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
		s.calls.Finish(p, func() { s.discard(w) })
		return nil, fmt.Errorf("podman: handing the command to container %.12s: %w", w.id, err)
	}
	// stdin stays open while the call runs, with a heartbeat on it: when
	// sandbash or the service goes away, the supervisor ends the call.
	go shared.Heartbeat(w.stdin, p.done)
	return p, nil
}

// WaitWarm waits until the session's pool is full: the next call is warm.
func (s *session) WaitWarm(ctx context.Context) error { return s.pool.WaitFull(ctx) }

// Close kills running calls and removes every container of the session.
func (s *session) Close() error {
	if s.calls.Shutdown(s.pool, func(p *process) {
		_ = p.Signal(syscall.SIGKILL)
		<-p.done
	}) {
		s.removeVolumes()
	}
	return nil
}

type process struct {
	*shared.Call
	s    *session
	w    *warm
	done chan struct{}
	once sync.Once
	aerr error // the attach stream's end, when it ended before the trailer
}

// Write receives the container's stdout from the attach stream.
func (p *process) Write(b []byte) (int, error) {
	n, err := p.Scan.Write(b)
	if t, _ := p.Scan.Done(); t != nil {
		p.once.Do(func() {
			close(p.done)
			// The call is over: end its stdin (and heartbeat) while the
			// stream is still up, so the bindings close it cleanly.
			p.w.stdin.Close()
		})
	}
	return n, err
}

// watch ends the call if the stream ends without a trailer.
func (p *process) watch() {
	select {
	case <-p.done:
	case err := <-p.w.attached:
		p.w.attached <- err // for discard
		p.once.Do(func() {
			p.aerr = err
			p.Scan.Flush()
			close(p.done)
		})
	}
}

// Signal sends sig to the container's init (catatonit), which passes it to
// the supervisor; the supervisor passes SIGTERM on to every process of the
// call. SIGKILL ends the container.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.Signaled(sig)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c, ccancel := p.s.b.with(ctx)
	defer ccancel()
	err := containers.Kill(c, p.w.id, new(containers.KillOptions).WithSignal(strconv.Itoa(int(sig))))
	if err != nil && !gone(err) {
		return fmt.Errorf("podman: signalling container %.12s: %w", p.w.id, err)
	}
	return nil
}

// gone reports a service error saying the container no longer runs.
func gone(err error) bool {
	var em *errorhandling.ErrorModel
	return errors.As(err, &em) && (em.ResponseCode == http.StatusNotFound || em.ResponseCode == http.StatusConflict)
}

// Wait waits for the trailer (or the stream's end) and removes the
// container in the background; the session's Close waits for that.
func (p *process) Wait() (backend.Exit, error) {
	<-p.done
	exit, err := p.Exit("podman", p.aerr, p.oomKilled, p.lost)
	p.s.calls.Finish(p, func() {
		p.w.out.set(nil)
		p.s.discard(p.w)
	})
	return exit, err
}

// oomKilled asks the service whether the memory limit killed the container.
func (p *process) oomKilled() bool {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	c, ccancel := p.s.b.with(ctx)
	defer ccancel()
	if _, err := containers.Wait(c, p.w.id, new(containers.WaitOptions).WithCondition([]define.ContainerStatus{define.ContainerStateStopped, define.ContainerStateExited}).WithInterval("20ms")); err != nil {
		return false
	}
	data, err := containers.Inspect(c, p.w.id, nil)
	return err == nil && data.State != nil && data.State.OOMKilled
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

// lost says what became of the call's container when its stream ended
// without a report: the service out of reach, or the container gone. It is
// "" when the service answers and still has the container.
func (p *process) lost() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, ccancel := p.s.b.with(ctx)
	defer ccancel()
	_, err := containers.Inspect(c, p.w.id, nil)
	var em *errorhandling.ErrorModel
	switch {
	case err == nil:
		return ""
	case errors.As(err, &em) && em.ResponseCode == http.StatusNotFound:
		return "the Podman service removed the call's container mid-call"
	case errors.As(err, &em):
		return ""
	}
	return fmt.Sprintf("lost the connection to the Podman service mid-call (%v); it stopped or restarted", err)
}
