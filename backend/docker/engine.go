package docker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandbash/sandbash/backend"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/overlay"
)

// engine is the Docker Engine API under package internal/ctrbackend's
// lifecycle.
type engine struct {
	cli     *client.Client
	seccomp string // the seccomp profile every container runs under (JSON)

	mu    sync.Mutex
	works map[string]workCleanup // by cache volume, as a user: see freeWork
}

var _ shared.Engine = (*engine)(nil)

func (e *engine) Name() string { return "docker" }

// Local: the daemon is reached over a Unix socket, so it sees this host's
// files (the session's output channels among them).
func (e *engine) Local() bool { return strings.HasPrefix(e.cli.DaemonHost(), "unix://") }

func (e *engine) Image(ctx context.Context, ref string) (shared.Image, bool, error) {
	img, err := e.cli.ImageInspect(ctx, ref)
	switch {
	case cerrdefs.IsNotFound(err):
		return shared.Image{}, false, nil
	case err != nil:
		return shared.Image{}, false, err
	}
	i := shared.Image{Ref: ref, ID: img.ID}
	if img.Config != nil {
		i.Env = img.Config.Env
	}
	return i, true, nil
}

func (e *engine) Pull(ctx context.Context, ref string, progress io.Writer) error {
	resp, err := e.cli.ImagePull(ctx, ref, client.ImagePullOptions{})
	if err != nil {
		return err
	}
	defer resp.Close()
	for msg, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return err
		}
		if msg.Error != nil {
			return errors.New(msg.Error.Message)
		}
		if msg.Status != "" {
			fmt.Fprintf(progress, "sandbash: pull %s: %s %s\n", ref, msg.ID, msg.Status)
		}
	}
	return nil
}

// Template computes the options of every container of a session once.
// They name the image by the ID it had at Open, so the image's ENV is the
// one containerEnv removes.
func (e *engine) Template(spec *shared.Spec) (shared.CreateFunc, error) {
	opts := e.createOptions(spec)
	if opts.Config.NetworkDisabled {
		local, err := writeHosts(spec.LocalDir)
		if err != nil {
			return nil, err
		}
		// The daemon reads it by the session directory's name on its host.
		hc := *opts.HostConfig
		hc.Mounts = append(slices.Clone(hc.Mounts), mount.Mount{Type: mount.TypeBind, Source: spec.Dir + strings.TrimPrefix(local, spec.LocalDir), Target: "/etc/hosts", ReadOnly: true})
		opts.HostConfig = &hc
	}
	e.rememberWork(spec)
	return func(ctx context.Context, name string) (string, error) {
		o := opts
		o.Name = name
		if spec.Channels != "" {
			hc := *o.HostConfig
			hc.Mounts = append(slices.Clone(hc.Mounts), mount.Mount{Type: mount.TypeBind, Source: filepath.Join(spec.Channels, name), Target: shared.ChannelDir})
			o.HostConfig = &hc
		}
		c, err := e.cli.ContainerCreate(ctx, o)
		return c.ID, err
	}, nil
}

// containerEnv is the containers' own environment: the supervisor's,
// with every variable the image's ENV sets unset (a name without "=" tells
// the daemon to drop it). The call's environment goes to the supervisor
// with the command.
func containerEnv(env, imageEnv []string) []string {
	env = slices.Clone(env)
	for _, e := range imageEnv {
		name, _, _ := strings.Cut(e, "=")
		if name != "" && !slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			env = append(env, name)
		}
	}
	return env
}

func (e *engine) createOptions(spec *shared.Spec) client.ContainerCreateOptions {
	mounts := []mount.Mount{
		{Type: mount.TypeBind, Source: spec.TmpDir, Target: "/tmp"},
		{Type: mount.TypeBind, Source: spec.HomeDir, Target: backend.Home},
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, mount.Mount{Type: mount.TypeBind, Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	for _, v := range spec.Volumes {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: v.Name, Target: v.Overlay.Target})
	}
	network := container.NetworkMode("none")
	if spec.Network == backend.NetworkOn {
		network = "bridge"
	}
	// Without the network, the container has a network namespace of its
	// own with only a loopback (the runtime makes it and brings lo up),
	// and the daemon does nothing of its networking: with NetworkMode
	// none alone it would still make a libnetwork sandbox and run itself
	// again as an OCI hook (libnetwork-setkey) for each container, about a
	// third of what starting one costs. It then makes no /etc/hosts:
	// Template mounts one (writeHosts).
	disabled := network == "none" && spec.LocalDir != ""
	// No engine init: the supervisor is the container's PID 1 (see
	// shared.Spec), whatever the daemon's default ("init": true).
	noInit := false
	l := spec.Limits
	pids := l.Pids
	return client.ContainerCreateOptions{
		Config: &container.Config{
			Image:        spec.Image.ID,
			User:         fmt.Sprintf("%d:%d", spec.UID, spec.GID),
			Env:          containerEnv(spec.Env, spec.Image.Env),
			WorkingDir:   spec.Workspace,
			Entrypoint:   []string{},
			Cmd:          spec.Command,
			Hostname:     "sandbash",
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			OpenStdin:    true,
			StdinOnce:    true,
			Labels:       shared.Labels(spec.ID),
			// See network above.
			NetworkDisabled: disabled,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    network,
			Runtime:        spec.Runtime,
			AutoRemove:     spec.AutoRemove,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges", "seccomp=" + e.seccomp},
			ReadonlyRootfs: true,
			Init:           &noInit,
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

// Run hijacks an attach connection, demultiplexes it, and starts the
// container. Closing the connection's write half closes the container's
// stdin (StdinOnce), as does sandbash's death: the daemon sees the
// connection end.
func (e *engine) Run(ctx context.Context, id string, stdout, stderr io.Writer) (shared.Stream, error) {
	att, err := e.cli.ContainerAttach(ctx, id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attaching to container %.12s: %w", id, err)
	}
	s := &stream{conn: att.HijackedResponse, done: make(chan struct{})}
	go s.read(stdout, stderr)
	if _, err := e.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

type stream struct {
	conn client.HijackedResponse
	done chan struct{}
	err  error
}

// read demultiplexes the attach stream until its end.
func (s *stream) read(stdout, stderr io.Writer) {
	defer close(s.done)
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	r := s.conn.Reader
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			return
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		dst := stdout
		if hdr[0] == 2 {
			dst = stderr
		}
		if _, err := io.CopyBuffer(dst, io.LimitReader(r, n), buf); err != nil {
			s.err = err
			return
		}
	}
}

func (s *stream) Write(p []byte) (int, error) { return s.conn.Conn.Write(p) }
func (s *stream) CloseStdin() error           { return s.conn.CloseWrite() }
func (s *stream) Done() <-chan struct{}       { return s.done }
func (s *stream) Err() error                  { <-s.done; return s.err }
func (s *stream) Close()                      { s.conn.Close(); <-s.done }

// AutoRemoves: the engine removes a container created with AutoRemove
// once it exited (shared.AutoRemover).
func (e *engine) AutoRemoves() bool { return true }

func (e *engine) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	_, err := e.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: strconv.Itoa(int(sig))})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return err
	}
	return nil
}

func (e *engine) Remove(ctx context.Context, id string) error {
	_, err := e.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	if cerrdefs.IsConflict(err) {
		// Auto-removal is already under way: wait for it, so that the
		// session's volumes are free when Close removes them and what gc
		// reports gone is gone.
		err = e.waitGone(ctx, id)
	}
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// waitGone waits until a container being removed is gone, for up to 10 s.
func (e *engine) waitGone(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		_, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %.12s is still being removed: %w", id, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OOMKilled waits until the container is no longer running (its state,
// OOMKilled included, is then final) and inspects it.
func (e *engine) OOMKilled(ctx context.Context, id string) (bool, error) {
	res := e.cli.ContainerWait(ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-res.Result:
	case err := <-res.Error:
		return false, err
	}
	r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return false, err
	}
	return r.Container.State != nil && r.Container.State.OOMKilled, nil
}

func (e *engine) Pid(ctx context.Context, id string) (int, error) {
	r, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil || r.Container.State == nil {
		return 0, err
	}
	return r.Container.State.Pid, nil
}

// Exists pings the daemon first: an inspection that fails for another
// reason than the container's absence does not say the daemon is gone.
func (e *engine) Exists(ctx context.Context, id string) (bool, error) {
	if _, err := e.cli.Ping(ctx, client.PingOptions{}); err != nil {
		return false, err
	}
	_, err := e.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	return !cerrdefs.IsNotFound(err), nil
}

func (e *engine) CreateVolume(ctx context.Context, v shared.Volume, labels map[string]string) error {
	_, err := e.cli.VolumeCreate(ctx, client.VolumeCreateOptions{
		Name:       v.Name,
		Driver:     "local",
		DriverOpts: map[string]string{"type": "overlay", "device": "overlay", "o": overlay.Options(v.Overlay) + ",nosuid"},
		Labels:     labels,
	})
	return err
}

func (e *engine) RemoveVolume(ctx context.Context, name string) error {
	_, err := e.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return err
	}
	return e.freeWork(ctx, name)
}

func (e *engine) List(ctx context.Context, kind shared.Kind, label string) ([]shared.Object, error) {
	filter := make(client.Filters).Add("label", label)
	var out []shared.Object
	switch kind {
	case shared.KindContainer:
		cs, err := e.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: filter})
		if err != nil {
			return nil, err
		}
		for _, c := range cs.Items {
			out = append(out, shared.Object{ID: c.ID, Labels: c.Labels})
		}
	case shared.KindVolume:
		vs, err := e.cli.VolumeList(ctx, client.VolumeListOptions{Filters: filter})
		if err != nil {
			return nil, err
		}
		for _, v := range vs.Items {
			out = append(out, shared.Object{ID: v.Name, Labels: v.Labels})
		}
	default:
		return nil, fmt.Errorf("no objects of kind %q", kind)
	}
	return out, nil
}

// hosts is the /etc/hosts of a container without the network, what the
// daemon writes for NetworkMode none: the loopback's names.
const hosts = `127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
fe00::0	ip6-localnet
ff00::0	ip6-mcastprefix
ff02::1	ip6-allnodes
ff02::2	ip6-allrouters
`

// writeHosts writes the session's /etc/hosts into its directory, which
// only sandbash can write to, and returns its path.
func writeHosts(sessionDir string) (string, error) {
	if sessionDir == "" {
		return "", fmt.Errorf("the session has no directory to keep its /etc/hosts in: %w", backend.ErrSetup)
	}
	path := filepath.Join(sessionDir, "hosts")
	// Readable by the call's user whatever the umask.
	if err := os.WriteFile(path, []byte(hosts), 0o644); err != nil || os.Chmod(path, 0o644) != nil {
		return "", fmt.Errorf("writing the containers' /etc/hosts in %s: %v: %w", sessionDir, err, backend.ErrSetup)
	}
	return path, nil
}
