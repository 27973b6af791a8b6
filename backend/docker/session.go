package docker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/overlay"
	"github.com/sandbash/sandbash/workspace"
)

// cleanupTimeout bounds daemon requests made while cleaning up, which run
// without the caller's context.
const cleanupTimeout = 30 * time.Second

// Open checks the image and the mounts and starts filling the session's
// warm pool.
func (b *Backend) Open(ctx context.Context, spec *backend.SessionSpec) (backend.Session, error) {
	if spec.Image == "" {
		return nil, fmt.Errorf("docker: no image configured; give one with --image, SANDBASH_IMAGE, or \"image\" in .devcontainer/devcontainer.json: %w", backend.ErrSetup)
	}
	if err := workspace.CheckSpec(spec); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	if err := shared.CheckEnv(spec.Env); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	img, err := b.ensureImage(ctx, spec.Image)
	if err != nil {
		return nil, err
	}
	s := &session{b: b, spec: spec}
	if err := s.createVolumes(ctx); err != nil {
		s.removeVolumes()
		return nil, err
	}
	s.create = b.createOptions(spec, img, s.volumes)
	if img.Config != nil {
		s.callEnv = shared.CallEnv(spec.Env, img.Config.Env)
	} else {
		s.callEnv = spec.Env
	}
	s.pool = shared.NewPool(b.poolSize, s.prepare, s.discard)
	return s, nil
}

// createVolumes makes one local-driver overlay volume per cache. The daemon
// mounts it once, however many of the session's containers use it, so the
// session's upper layer never has two live mounts.
func (s *session) createVolumes(ctx context.Context) error {
	for i, o := range s.spec.Overlays {
		name := fmt.Sprintf("sandbash-%s-cache%d", s.spec.ID, i)
		_, err := s.b.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
			Name:       name,
			Driver:     "local",
			DriverOpts: map[string]string{"type": "overlay", "device": "overlay", "o": overlay.Options(o) + ",nosuid"},
			Labels:     shared.Labels(s.spec.ID),
		})
		if err != nil {
			return fmt.Errorf("docker: creating the %s cache volume: %w", o.Name, err)
		}
		s.volumes = append(s.volumes, name)
	}
	return nil
}

func (s *session) removeVolumes() {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for _, v := range s.volumes {
		_, _ = s.b.cli.VolumeRemove(ctx, v, client.VolumeRemoveOptions{Force: true})
	}
}

// ensureImage pulls the image if it is not present, with progress, and
// returns what it is now.
func (b *Backend) ensureImage(ctx context.Context, image string) (client.ImageInspectResult, error) {
	img, err := b.cli.ImageInspect(ctx, image)
	if err == nil {
		return img, nil
	}
	if !cerrdefs.IsNotFound(err) {
		return img, fmt.Errorf("docker: inspecting image %s: %w", image, err)
	}
	fmt.Fprintf(b.progress, "sandbash: image %s is not on this machine; pulling it\n", image)
	resp, err := b.cli.ImagePull(ctx, image, client.ImagePullOptions{})
	if err == nil {
		for msg, merr := range resp.JSONMessages(ctx) {
			if merr != nil {
				err = merr
				break
			}
			if msg.Error != nil {
				err = errors.New(msg.Error.Message)
				break
			}
			if msg.Status != "" {
				fmt.Fprintf(b.progress, "sandbash: pull %s: %s %s\n", image, msg.ID, msg.Status)
			}
		}
		resp.Close()
	}
	if err == nil {
		img, err = b.cli.ImageInspect(ctx, image)
	}
	if err != nil {
		return img, fmt.Errorf("docker: image %s is not on this machine and pulling it failed: %v. Load or build it first (for sandbash's test images: make images), or give another with --image: %w", image, err, backend.ErrSetup)
	}
	return img, nil
}

// containerEnv is the containers' own environment: the supervisor's,
// with every variable the image's ENV sets unset (a name without "=" tells
// the daemon to drop it). The call's environment goes to the supervisor
// with the command.
func containerEnv(img client.ImageInspectResult) []string {
	env := shared.SupervisorEnv()
	if img.Config == nil {
		return env
	}
	for _, e := range img.Config.Env {
		name, _, _ := strings.Cut(e, "=")
		if name != "" && !slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			env = append(env, name)
		}
	}
	return env
}

// createOptions are the options of every container of a session. They
// name the image by the ID it had at Open, so the image's ENV is the one
// containerEnv removes.
func (b *Backend) createOptions(spec *backend.SessionSpec, img client.ImageInspectResult, volumes []string) client.ContainerCreateOptions {
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: spec.TmpDir, Target: "/tmp"},
		{Type: mount.TypeBind, Source: spec.HomeDir, Target: backend.Home},
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for i, v := range volumes {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: v, Target: spec.Overlays[i].Target})
	}
	network := container.NetworkMode("none")
	if spec.Network == backend.NetworkOn {
		network = "bridge"
	}
	init := true
	pids := b.limits.Pids
	l := b.limits
	return client.ContainerCreateOptions{
		Config: &container.Config{
			Image:        img.ID,
			User:         fmt.Sprintf("%d:%d", spec.UID, spec.GID),
			Env:          containerEnv(img),
			WorkingDir:   spec.Workspace,
			Entrypoint:   []string{},
			Cmd:          shared.Command(),
			Hostname:     "sandbash",
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			OpenStdin:    true,
			StdinOnce:    true,
			Labels:       shared.Labels(spec.ID),
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    network,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges", "seccomp=" + b.seccomp},
			ReadonlyRootfs: true,
			Init:           &init,
			IpcMode:        "private",
			// Keep no copy of the output: the attach stream carries it.
			LogConfig: container.LogConfig{Type: "none"},
			Mounts:    mounts,
			Tmpfs: map[string]string{
				shared.SupervisorDir: fmt.Sprintf("rw,exec,nosuid,nodev,size=16m,mode=0700,uid=%d,gid=%d", spec.UID, spec.GID),
			},
			Resources: container.Resources{
				Memory:     l.Memory,
				MemorySwap: l.Memory,
				NanoCPUs:   int64(l.CPUs * 1e9),
				PidsLimit:  &pids,
				Ulimits:    ulimits(l),
			},
		},
	}
}

// ulimits are the call's rlimits: open files, processes per user, and the
// largest file it may write (which bounds what one file in the session's
// /tmp or HOME, host directories, can take).
func ulimits(l shared.Limits) []*container.Ulimit {
	u := []*container.Ulimit{
		{Name: "nofile", Soft: l.NoFile, Hard: l.NoFile},
		{Name: "nproc", Soft: l.NProc, Hard: l.NProc},
	}
	if l.FileSize > 0 {
		u = append(u, &container.Ulimit{Name: "fsize", Soft: l.FileSize, Hard: l.FileSize})
	}
	return u
}

type session struct {
	b       *Backend
	spec    *backend.SessionSpec
	create  client.ContainerCreateOptions
	volumes []string // cache volumes, removed at Close
	callEnv []string // the calls' environment (shared.CallEnv)
	pool    *shared.Pool[*warm]
	seq     atomic.Int64

	calls shared.Calls[*process]
}

// warm is a started container waiting for its one call.
type warm struct {
	id   string
	conn client.HijackedResponse
}

// prepare creates, attaches to and starts one container.
//
// It does not let Close cancel it half-way: a create whose request is
// cancelled can still complete in the daemon, leaving a container nobody
// knows of. It finishes (bounded by cleanupTimeout) and the pool discards
// what arrives after Close.
func (s *session) prepare(ctx context.Context) (*warm, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := workspace.Verify(s.spec); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	opts := s.create
	opts.Name = fmt.Sprintf("sandbash-%s-%d", s.spec.ID, s.seq.Add(1))
	c, err := s.b.cli.ContainerCreate(ctx, opts)
	if err != nil {
		s.remove(opts.Name)
		return nil, fmt.Errorf("docker: creating a container from %s: %w", s.spec.Image, err)
	}
	att, err := s.b.cli.ContainerAttach(ctx, c.ID, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		s.remove(c.ID)
		return nil, fmt.Errorf("docker: attaching to container %.12s: %w", c.ID, err)
	}
	w := &warm{id: c.ID, conn: att.HijackedResponse}
	if _, err := s.b.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		s.discard(w)
		return nil, fmt.Errorf("docker: starting a container from %s: %w", s.spec.Image, err)
	}
	// Warm means the supervisor waits for its call, not merely started.
	deadline, _ := ctx.Deadline()
	_ = w.conn.Conn.SetReadDeadline(deadline)
	err = shared.WaitReady(&stderrOnly{r: w.conn.Reader})
	_ = w.conn.Conn.SetReadDeadline(time.Time{})
	if err != nil {
		s.discard(w)
		return nil, fmt.Errorf("docker: image %s: %w", s.spec.Image, err)
	}
	return w, nil
}

// stderrOnly reads the stderr frames of a multiplexed attach stream,
// dropping stdout (there is none before a call).
type stderrOnly struct {
	r    io.Reader
	left int64 // bytes left in the current stderr frame
}

func (s *stderrOnly) Read(p []byte) (int, error) {
	var hdr [8]byte
	for s.left == 0 {
		if _, err := io.ReadFull(s.r, hdr[:]); err != nil {
			return 0, err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		if hdr[0] == 2 {
			s.left = n
			continue
		}
		if _, err := io.CopyN(io.Discard, s.r, n); err != nil {
			return 0, err
		}
	}
	n, err := s.r.Read(p[:min(int64(len(p)), s.left)])
	s.left -= int64(n)
	return n, err
}

// discard releases a container: closing the attach connection closes its
// stdin, and removal kills it.
func (s *session) discard(w *warm) {
	w.conn.Close()
	s.remove(w.id)
}

func (s *session) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err := s.b.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if cerrdefs.IsConflict(err) {
		// Auto-removal is already under way: wait for it, so that the
		// session's volumes are free when Close removes them. Anything
		// that fails here is left for `sandbash gc`, which finds it by its
		// labels.
		_ = s.b.waitGone(ctx, id)
	}
}

// Start hands the command to a warm container.
func (s *session) Start(ctx context.Context, c *backend.Call) (backend.Process, error) {
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
	if _, err := w.conn.Conn.Write(shared.Handover(nonce, c.Command, s.callEnv, c.Deadline, c.KillGrace)); err != nil {
		s.discard(w)
		return nil, fmt.Errorf("docker: handing the command to container %.12s: %w", w.id, err)
	}
	// The container's stdin stays open while the call runs, with a
	// heartbeat on it: when sandbash dies, the daemon closes it
	// (StdinOnce), and the supervisor ends the call.
	p := &process{s: s, w: w, Call: shared.NewCall(c.Output, nonce), done: make(chan struct{})}
	if !s.calls.Add(p) {
		s.discard(w)
		return nil, backend.ErrClosed
	}
	go p.read()
	go shared.Heartbeat(w.conn.Conn, p.done)
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
	rerr error
}

// read demultiplexes the attach stream until the trailer or its end.
func (p *process) read() {
	defer close(p.done)
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	r := p.w.conn.Reader
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				p.rerr = err
			}
			p.Scan.Flush()
			return
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		var dst io.Writer = p.Scan
		if hdr[0] == 2 {
			dst = p.Diag()
		}
		if _, err := io.CopyBuffer(dst, io.LimitReader(r, n), buf); err != nil {
			p.rerr = err
			p.Scan.Flush()
			return
		}
		if t, _ := p.Scan.Done(); t != nil {
			return
		}
	}
}

// Signal sends sig to the container's init, which passes it to the
// supervisor; the supervisor passes SIGTERM on to every process of the call.
// SIGKILL ends the container.
func (p *process) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.Signaled(sig)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err := p.s.b.cli.ContainerKill(ctx, p.w.id, client.ContainerKillOptions{Signal: strconv.Itoa(int(sig))})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("docker: signalling container %.12s: %w", p.w.id, err)
	}
	return nil
}

// Wait waits for the trailer (or the end of the stream) and removes the
// container in the background; the session's Close waits for that.
func (p *process) Wait() (backend.Exit, error) {
	<-p.done
	exit, err := p.Exit("docker", p.rerr, p.oomKilled, p.lost)
	p.s.calls.Finish(p, func() { p.s.discard(p.w) })
	return exit, err
}

// oomKilled asks the daemon whether the memory limit killed the container.
func (p *process) oomKilled() bool {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := p.s.b.waitExited(ctx, p.w.id); err != nil {
		return false
	}
	r, err := p.s.b.cli.ContainerInspect(ctx, p.w.id, client.ContainerInspectOptions{})
	return err == nil && r.Container.State != nil && r.Container.State.OOMKilled
}

// lost says what became of the call's container when its stream ended
// without a report: the daemon out of reach, or the container gone. It is
// "" when the daemon answers and still has the container.
func (p *process) lost() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.s.b.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return fmt.Sprintf("lost the connection to the Docker daemon mid-call (%v); it stopped or restarted", err)
	}
	if _, err := p.s.b.cli.ContainerInspect(ctx, p.w.id, client.ContainerInspectOptions{}); cerrdefs.IsNotFound(err) {
		return "the Docker daemon removed the call's container mid-call"
	}
	return ""
}
