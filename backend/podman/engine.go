//go:build containers_image_openpgp

package podman

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/podman/internal/libpod"
	shared "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/overlay"
)

// cleanupTimeout bounds service requests made while cleaning up.
const cleanupTimeout = 30 * time.Second

// engine is the libpod API under package internal/ctrbackend's lifecycle.
type engine struct {
	c      *libpod.Client
	uri    string
	limits shared.Limits
	// rootless: the service runs as uid (not root) in a user namespace of
	// its own; only that uid's files can be a call's.
	rootless bool
	uid      int
	// ids is the service's user namespace's uid and gid maps (a rootless
	// service's), from which the containers' keep-id maps are computed.
	ids *libpod.IDMappingOptions
	enf Enforcement // which limits the service sets per container
}

// rootful is what a rootful service enforces: every cgroup limit.
var rootful = Enforcement{Memory: true, Pids: true, CPU: true}

// probe asks the service whether it is rootless, as which user, and which
// cgroup limits it can set. Root's own socket needs no asking (the rootful
// service's info is slow to answer).
func (e *engine) probe(ctx context.Context) error {
	if p, ok := strings.CutPrefix(e.uri, "unix://"); ok {
		if fi, err := os.Stat(p); err == nil && fi.Sys().(*syscall.Stat_t).Uid == 0 {
			return nil
		}
	}
	i, err := e.c.Info(ctx)
	if err != nil {
		return err
	}
	if i.Host == nil {
		return errors.New("the service reported no host information")
	}
	if !i.Host.Security.Rootless {
		return nil
	}
	e.rootless, e.uid = true, -1
	for _, m := range i.Host.IDMappings.UIDMap {
		if m.ContainerID == 0 && m.Size >= 1 {
			e.uid = m.HostID
		}
	}
	if e.uid < 0 {
		return fmt.Errorf("the rootless service reported no uid mapping for its root: %+v", i.Host.IDMappings.UIDMap)
	}
	if e.ids, err = keepID(i.Host.IDMappings.UIDMap, i.Host.IDMappings.GIDMap); err != nil {
		return err
	}
	// Rootless Podman sets cgroup limits only on cgroup v2, and only for
	// the controllers delegated to its user; elsewhere it ignores them
	// ("Resource limits are not supported and ignored on cgroups V1
	// rootless systems"), with no error through the API.
	v2 := i.Host.CgroupsVersion == "v2"
	e.enf = Enforcement{
		Memory: v2 && slices.Contains(i.Host.CgroupControllers, "memory"),
		Pids:   v2 && slices.Contains(i.Host.CgroupControllers, "pids"),
		CPU:    v2 && slices.Contains(i.Host.CgroupControllers, "cpu"),
	}
	return nil
}

// shmSize is /dev/shm's size where no memory cgroup counts it: half the
// memory limit, as on bwrap.
func shmSize(l shared.Limits) int64 { return l.Memory / 2 }

// summary says what the service caps and how.
func (e *engine) summary() string {
	l := e.limits
	var parts []string
	if e.enf.Memory && e.enf.Pids && e.enf.CPU {
		parts = append(parts, fmt.Sprintf("cgroup limits per call: memory %d MiB, tmpfs included, no swap; %d processes and threads; %g CPUs", l.Memory>>20, l.Pids, l.CPUs))
	} else {
		parts = append(parts, "this rootless Podman service cannot set every cgroup limit here (it needs cgroup v2 with the memory, pids and cpu controllers delegated to its user; a rootful service, or Docker, sets them all)")
		if e.enf.Memory {
			parts = append(parts, fmt.Sprintf("memory %d MiB per call, tmpfs included, no swap", l.Memory>>20))
		} else {
			parts = append(parts, fmt.Sprintf("memory %d MiB per process (RLIMIT_DATA), not per call, and /dev/shm %d MiB", l.Memory>>20, shmSize(l)>>20))
		}
		if e.enf.Pids {
			parts = append(parts, fmt.Sprintf("%d processes and threads per call", l.Pids))
		} else {
			parts = append(parts, fmt.Sprintf("%d processes and threads per call (RLIMIT_NPROC in the container's user namespace, which Linux 5.14+ counts per namespace; before, all of the user's processes count)", l.Pids))
		}
		if e.enf.CPU {
			parts = append(parts, fmt.Sprintf("%g CPUs", l.CPUs))
		} else {
			parts = append(parts, "CPU not limited")
		}
	}
	if l.FileSize > 0 {
		parts = append(parts, fmt.Sprintf("files up to %d MiB each (RLIMIT_FSIZE)", l.FileSize>>20))
	}
	return strings.Join(parts, "; ")
}

var _ shared.Engine = (*engine)(nil)

func (e *engine) Name() string { return "podman" }

// Local: the service is reached over a Unix socket, so it sees this host's
// files (the session's output channels among them).
func (e *engine) Local() bool { return strings.HasPrefix(e.uri, "unix://") }

func (e *engine) Image(ctx context.Context, ref string) (shared.Image, bool, error) {
	ok, err := e.c.ImageExists(ctx, ref)
	if err != nil || !ok {
		return shared.Image{}, false, err
	}
	img, err := e.c.ImageInspect(ctx, ref)
	if err != nil {
		return shared.Image{}, false, err
	}
	i := shared.Image{Ref: ref, ID: img.ID}
	if img.Config != nil {
		i.Env = img.Config.Env
	}
	return i, true, nil
}

// Pull pulls with the service's own registry credentials (those of the
// user it runs as).
func (e *engine) Pull(ctx context.Context, ref string, progress io.Writer) error {
	return e.c.Pull(ctx, ref, progress)
}

// Template writes the seccomp profile into the session's directory (the
// libpod API takes a profile only as a path); each container's spec is
// made when it is created.
func (e *engine) Template(sp *shared.Spec) (shared.CreateFunc, error) {
	if e.rootless && (sp.UID != e.uid || sp.GID < 0) {
		return nil, fmt.Errorf("the Podman service at %s is rootless, run by uid %d: its containers can run as that user only (keep-id), and calls run as the workspace owner, uid %d; use that user's own Podman service, or root's (/run/podman/podman.sock)", e.uri, e.uid, sp.UID)
	}
	if e.rootless && sp.Network == backend.NetworkOn {
		if err := tunUsable(e.uid); err != nil {
			return nil, fmt.Errorf("the network on under the rootless Podman service at %s needs /dev/net/tun (slirp4netns connects each call's network namespace through it), and uid %d cannot open it: %v; run sandbash as root (root's Podman service), or make /dev/net/tun usable by users as udev does on most hosts (chmod 0666 /dev/net/tun)", e.uri, e.uid, err)
		}
	}
	local, err := writeProfile(sp.LocalDir)
	if err != nil {
		return nil, err
	}
	// The service reads it: by the session directory's name on its host.
	profile := sp.Dir + strings.TrimPrefix(local, sp.LocalDir)
	return func(ctx context.Context, name string) (string, error) {
		g := e.specFor(sp, profile, name)
		if sp.Channels != "" {
			g.Mounts = append(g.Mounts, spec.Mount{Type: "bind", Source: filepath.Join(sp.Channels, name), Destination: shared.ChannelDir, Options: []string{"rbind", "rw", "nosuid"}})
		}
		return e.c.ContainerCreate(ctx, g)
	}, nil
}

// specFor is the container spec of one call's container.
func (e *engine) specFor(sp *shared.Spec, seccompProfile, name string) *libpod.SpecGenerator {
	l := sp.Limits
	g := &libpod.SpecGenerator{Image: sp.Image.Ref}
	g.Name = name
	g.Entrypoint = []string{}
	g.Command = sp.Command
	// The container's own environment is the supervisor's: nothing from
	// the image or containers.conf. The call's goes with the command.
	no, yes := false, true
	g.UnsetEnvAll = &yes
	g.Env = map[string]string{}
	for _, e := range sp.Env {
		k, v, _ := strings.Cut(e, "=")
		g.Env[k] = v
	}
	// Keep no copy of the output: the attach stream carries it.
	g.LogConfiguration = &libpod.LogConfig{Driver: "none"}
	g.HTTPProxy = &no
	g.WorkDir = sp.Workspace
	g.User = fmt.Sprintf("%d:%d", sp.UID, sp.GID)
	g.Hostname = "sandbash"
	g.Labels = shared.Labels(sp.ID)
	if sp.AutoRemove {
		g.Remove = &yes
	}
	g.Stdin = &yes
	g.Terminal = &no
	g.CapDrop = []string{"ALL"}
	g.NoNewPrivileges = &yes
	g.SeccompProfilePath = seccompProfile
	g.ReadOnlyFilesystem = &yes
	g.ReadWriteTmpfs = &no
	// No init: the supervisor is the container's PID 1 (see shared.Spec),
	// whatever containers.conf says.
	g.Init = &no
	g.OCIRuntime = sp.Runtime
	g.IpcNS = &libpod.Namespace{NSMode: libpod.Private}
	g.NetNS = &libpod.Namespace{NSMode: libpod.NoNetwork}
	if sp.Network == backend.NetworkOn {
		g.NetNS = &libpod.Namespace{NSMode: libpod.Bridge}
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
	for _, v := range sp.Volumes {
		g.Volumes = append(g.Volumes, &libpod.NamedVolume{Name: v.Name, Dest: v.Overlay.Target, Options: []string{"rw", "nosuid"}})
	}
	if e.rootless {
		// The user's uid is itself in the container (the rest of the
		// container's ids are the user's subordinate ones): files a call
		// creates in the workspace are the user's, and none of the
		// container's ids is host root.
		// The maps keep-id makes, given explicitly: with keep-id, Podman
		// 4.3's service reads the subordinate ids through libsubid for
		// each container, which crashes the service (SIGSEGV) when
		// containers are made concurrently (containers/storage#2030).
		g.UserNS = &libpod.Namespace{NSMode: libpod.Private}
		g.IDMappings = e.ids
	}
	mem, period := l.Memory, uint64(100000)
	quota := int64(l.CPUs * float64(period))
	res := &spec.LinuxResources{}
	nproc := l.NProc
	// Podman fails to start any container here unless nofile and nproc
	// are explicit.
	g.Rlimits = []spec.POSIXRlimit{{Type: "nofile", Hard: uint64(l.NoFile), Soft: uint64(l.NoFile)}}
	if e.enf.Memory {
		res.Memory = &spec.LinuxMemory{Limit: &mem, Swap: &mem}
	} else {
		// No memory cgroup: cap each process's data (its heap and
		// anonymous mappings), as bwrap does without cgroups. The
		// supervisor's shell sets it (soft and hard) before it becomes the
		// supervisor: as an OCI rlimit it would bind the runtime's own
		// init in the container too, which fails under a small limit.
		g.Command = append([]string{"bash", "-p", "-c", fmt.Sprintf(`ulimit -d %d && exec "$@"`, mem>>10), "sandbash"}, sp.Command...)
		// tmpfs is memory no process's RLIMIT_DATA counts.
		shm := shmSize(l)
		g.ShmSize = &shm
	}
	if e.enf.CPU {
		res.CPU = &spec.LinuxCPU{Quota: &quota, Period: &period}
	}
	if e.enf.Pids {
		res.Pids = &spec.LinuxPids{Limit: l.Pids}
	} else {
		// No pids cgroup: RLIMIT_NPROC, counted in the container's own
		// user namespace.
		nproc = min(nproc, l.Pids)
	}
	g.Rlimits = append(g.Rlimits, spec.POSIXRlimit{Type: "nproc", Hard: uint64(nproc), Soft: uint64(nproc)})
	if res.Memory != nil || res.CPU != nil || res.Pids != nil {
		g.ResourceLimits = res
	}
	if l.FileSize > 0 {
		// The largest file a call may write: bounds what one file in the
		// session's /tmp or HOME (host directories) can take.
		g.Rlimits = append(g.Rlimits, spec.POSIXRlimit{Type: "fsize", Hard: uint64(l.FileSize), Soft: uint64(l.FileSize)})
	}
	return g
}

// Run attaches on a connection of its own (the service takes it over), then
// starts the container: nothing it writes is missed.
func (e *engine) Run(ctx context.Context, id string, stdout, stderr io.Writer) (shared.Stream, error) {
	a, err := e.c.Attach(ctx, id)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("attaching to container %.12s: %w", id, ctx.Err())
		} else {
			err = fmt.Errorf("attaching to container %.12s: %v", id, err)
		}
		e.removeAfterFailure(id)
		return nil, err
	}
	s := &stream{a: a, done: make(chan struct{})}
	go func() {
		s.err = a.Demux(stdout, stderr)
		a.Close()
		close(s.done)
	}()
	if err := e.c.ContainerStart(ctx, id); err != nil {
		// Removing the container ends the stream too.
		_ = s.CloseStdin()
		e.removeAfterFailure(id)
		s.Close()
		return nil, err
	}
	return s, nil
}

// removeAfterFailure removes a container that Run could not run.
func (e *engine) removeAfterFailure(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = e.Remove(ctx, id)
}

type stream struct {
	a    *libpod.Attachment
	done chan struct{}
	err  error
}

func (s *stream) Write(p []byte) (int, error) { return s.a.Write(p) }
func (s *stream) CloseStdin() error           { return s.a.CloseWrite() }
func (s *stream) Done() <-chan struct{}       { return s.done }
func (s *stream) Err() error                  { <-s.done; return s.err }
func (s *stream) Close()                      { s.a.Close(); <-s.done }

// AutoRemoves: the engine removes a container created with AutoRemove
// once it exited (shared.AutoRemover).
func (e *engine) AutoRemoves() bool { return true }

func (e *engine) Kill(ctx context.Context, id string, sig syscall.Signal) error {
	err := e.c.ContainerKill(ctx, id, strconv.Itoa(int(sig)))
	if err != nil && !gone(err) {
		return err
	}
	return nil
}

// gone reports a service error saying the object no longer exists or runs.
func gone(err error) bool {
	var em *libpod.Error
	return errors.As(err, &em) && (em.ResponseCode == http.StatusNotFound || em.ResponseCode == http.StatusConflict)
}

// Remove tries until the container is gone: Podman 4.3 refuses a forced
// removal while a container is between stopped and exited ("container
// state improper").
func (e *engine) Remove(ctx context.Context, id string) error {
	for {
		err := e.c.ContainerRemove(ctx, id)
		ok, xerr := e.c.ContainerExists(ctx, id)
		switch {
		case xerr != nil:
			return cmp.Or(err, xerr)
		case !ok:
			return nil
		}
		select {
		case <-ctx.Done():
			return cmp.Or(err, fmt.Errorf("container %.12s is still there: %w", id, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OOMKilled waits until the container has stopped and inspects it.
func (e *engine) OOMKilled(ctx context.Context, id string) (bool, error) {
	if _, err := e.c.ContainerWait(ctx, id, []string{"stopped", "exited"}, "20ms"); err != nil {
		return false, err
	}
	data, err := e.c.ContainerInspect(ctx, id)
	if err != nil {
		return false, err
	}
	return data.State != nil && data.State.OOMKilled, nil
}

func (e *engine) Pid(ctx context.Context, id string) (int, error) {
	data, err := e.c.ContainerInspect(ctx, id)
	if err != nil || data.State == nil {
		return 0, err
	}
	return data.State.Pid, nil
}

// Exists inspects the container: any answer of the service (an error
// model) means it is reachable.
func (e *engine) Exists(ctx context.Context, id string) (bool, error) {
	_, err := e.c.ContainerInspect(ctx, id)
	var em *libpod.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &em):
		return em.ResponseCode != http.StatusNotFound, nil
	}
	return false, err
}

// CreateVolume makes a local-driver overlay volume, which Podman mounts
// once for all the session's containers (per-container overlay volumes
// would mount the upper layer twice). The containers mount it nosuid.
func (e *engine) CreateVolume(ctx context.Context, v shared.Volume, labels map[string]string) error {
	return e.c.VolumeCreate(ctx, libpod.VolumeCreate{
		Name:    v.Name,
		Driver:  "local",
		Options: map[string]string{"type": "overlay", "device": "overlay", "o": overlay.Options(v.Overlay)},
		Labels:  labels,
	})
}

func (e *engine) RemoveVolume(ctx context.Context, name string) error {
	if err := e.c.VolumeRemove(ctx, name); err != nil && !gone(err) {
		return err
	}
	return nil
}

func (e *engine) List(ctx context.Context, kind shared.Kind, label string) ([]shared.Object, error) {
	filter := map[string][]string{"label": {label}}
	var out []shared.Object
	switch kind {
	case shared.KindContainer:
		cs, err := e.c.ContainerList(ctx, filter)
		if err != nil {
			return nil, err
		}
		for _, ct := range cs {
			out = append(out, shared.Object{ID: ct.ID, Labels: ct.Labels})
		}
	case shared.KindVolume:
		vs, err := e.c.VolumeList(ctx, filter)
		if err != nil {
			return nil, err
		}
		for _, v := range vs {
			out = append(out, shared.Object{ID: v.Name, Labels: v.Labels})
		}
	default:
		return nil, fmt.Errorf("no objects of kind %q", kind)
	}
	return out, nil
}

// tunUsable says why uid cannot open /dev/net/tun, which a rootless
// service's slirp4netns needs for a container with the network on; nil if
// it can. Where devices are not made by udev (a VM's bare devtmpfs), the
// device is 0600 root's, and rootless Podman fails only when it starts a
// container, saying little. For our own uid it opens the device; for
// another's (root using a user's service) it reads the mode's bits for
// others, or the owner's if uid owns it.
func tunUsable(uid int) error {
	const tun = "/dev/net/tun"
	if os.Geteuid() == uid {
		f, err := os.OpenFile(tun, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	fi, err := os.Stat(tun)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm()&0o006 == 0o006 || (int(st.Uid) == uid && fi.Mode().Perm()&0o600 == 0o600) {
		return nil
	}
	return fmt.Errorf("%s is mode %04o, owned by uid %d", tun, fi.Mode().Perm(), st.Uid)
}

// keepID computes what Podman's --userns keep-id maps for a rootless
// service whose own user namespace has the maps uids and gids (as its
// info reports them: container_id is the id in the service's namespace,
// where 0 is the user): the user's uid and gid (what the service's 0
// stands for on the host) are themselves in the container; the
// container's ids below them are the namespace's 1..id, and those above
// them the namespace's own.
func keepID(uids, gids []libpod.IDMap) (*libpod.IDMappingOptions, error) {
	one := func(what string, m []libpod.IDMap) ([]libpod.IDMap, error) {
		id, total := -1, 0
		for _, r := range m {
			if r.ContainerID == 0 && r.Size >= 1 {
				id = r.HostID
			}
			total = max(total, r.ContainerID+r.Size)
		}
		if id < 0 {
			return nil, fmt.Errorf("the rootless service reported no %s mapping for its root: %+v", what, m)
		}
		if total-1 < id {
			return nil, fmt.Errorf("the rootless service's user namespace holds %d subordinate %ss, fewer than the user's own %s %d, which calls keep as themselves (keep-id): give the user at least %d in /etc/sub%s, then restart its Podman service (podman system migrate)", total-1, what, what, id, id, what)
		}
		out := []libpod.IDMap{{ContainerID: 0, HostID: 1, Size: id}, {ContainerID: id, HostID: 0, Size: 1}}
		if rest := total - id - 1; rest > 0 {
			out = append(out, libpod.IDMap{ContainerID: id + 1, HostID: id + 1, Size: rest})
		}
		return out, nil
	}
	u, err := one("uid", uids)
	if err != nil {
		return nil, err
	}
	g, err := one("gid", gids)
	if err != nil {
		return nil, err
	}
	return &libpod.IDMappingOptions{UIDMap: u, GIDMap: g}, nil
}
