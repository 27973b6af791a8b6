package bwrap

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moby/sys/mountinfo"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/owner"
)

// Each call runs in cgroups of its own where the host lets sandbash create
// them: <base>/<owner>.<session>/call-<n>, one per hierarchy (cgroup v1
// mounts each controller on its own; v2 has one). base is
// <mount>/sandbash as root, or a delegated v2 subtree otherwise. The
// session's directory carries its owner (pid and start time), so a later
// sandbash can tell the leftovers of a dead one from a live session's.

// cgroupControllers are the controllers sandbash uses, by the limit each
// enforces.
var cgroupControllers = []string{"memory", "pids", "cpu"}

// hierarchy is one cgroup hierarchy sandbash puts calls in.
type hierarchy struct {
	v2    bool
	base  string   // the directory sessions' cgroups go under
	ctrls []string // the controllers of cgroupControllers it provides
	// mount is where the hierarchy is mounted, and root the cgroup its
	// mount shows there (mountinfo's root: "/" unless the mount shows a
	// part of the hierarchy, as in a container): a cgroup path of
	// /proc/*/cgroup is the directory mount + (path - root).
	mount, root string
}

// cgroups are the hierarchies in use. A controller appears in at most one.
type cgroups struct {
	hs []hierarchy
	// self is the leaf sandbash moved itself into to delegate its own v2
	// cgroup, or "".
	self string
}

func (c *cgroups) has(ctrl string) bool {
	for _, h := range c.hs {
		if slices.Contains(h.ctrls, ctrl) {
			return true
		}
	}
	return false
}

func (c *cgroups) version() string {
	v1, v2 := false, false
	for _, h := range c.hs {
		v2 = v2 || h.v2
		v1 = v1 || !h.v2
	}
	switch {
	case v1 && v2:
		return "cgroup v1 and v2"
	case v2:
		return "cgroup v2"
	}
	return "cgroup v1"
}

func (c *cgroups) bases() string {
	var b []string
	for _, h := range c.hs {
		b = append(b, h.base)
	}
	s := strings.Join(b, ", ")
	if c.self != "" {
		s += " (sandbash moved itself into " + c.self + " to delegate the rest)"
	}
	return s
}

// cgroupMount is where a hierarchy is mounted: its mount point, and the
// cgroup the mount shows there (see hierarchy).
type cgroupMount struct{ point, root string }

// cgroupMounts lists the cgroup mounts: for v1, the mount of each of
// cgroupControllers; for v2, its mount under the key "".
func cgroupMounts() map[string]cgroupMount {
	m := map[string]cgroupMount{}
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup", "cgroup2"))
	if err != nil {
		return m
	}
	for _, mi := range mounts {
		switch mi.FSType {
		case "cgroup2":
			if _, seen := m[""]; !seen {
				m[""] = cgroupMount{mi.Mountpoint, mi.Root}
			}
		case "cgroup":
			for _, o := range strings.Split(mi.VFSOptions, ",") {
				if slices.Contains(cgroupControllers, o) {
					if _, seen := m[o]; !seen {
						m[o] = cgroupMount{mi.Mountpoint, mi.Root}
					}
				}
			}
		}
	}
	return m
}

// findCgroups finds the hierarchies sandbash can create cgroups in. It
// returns nil, with the reason, when there are none.
func findCgroups() (*cgroups, string) {
	mounts := cgroupMounts()
	c := &cgroups{}
	var why []string
	// v1 controllers, each in its own hierarchy (cpu is often co-mounted
	// with cpuacct: the same directory serves).
	for _, ctrl := range cgroupControllers {
		mnt, ok := mounts[ctrl]
		if !ok {
			continue
		}
		base := filepath.Join(mnt.point, "sandbash")
		if err := usableDir(base); err != nil {
			why = append(why, fmt.Sprintf("cgroup v1 %s: %v", ctrl, err))
			continue
		}
		c.hs = append(c.hs, hierarchy{base: base, ctrls: []string{ctrl}, mount: mnt.point, root: mnt.root})
	}
	if mnt, ok := mounts[""]; ok {
		h, self, err := v2Hierarchy(mnt.point, c)
		switch {
		case err != nil:
			why = append(why, "cgroup v2: "+err.Error())
		case h != nil:
			c.hs = append(c.hs, *h)
			c.self = self
		}
	}
	if !c.has("memory") && !c.has("pids") {
		if len(why) == 0 {
			why = append(why, "no cgroup hierarchy with the memory or pids controller is mounted")
		}
		return nil, strings.Join(why, "; ")
	}
	return c, ""
}

// usableDir creates dir if needed and checks that this process can create
// cgroups in it.
func usableDir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	return nil
}

// v2Hierarchy returns the v2 hierarchy for the controllers v1 does not
// already provide: <mount>/sandbash as root; otherwise this process's own
// cgroup, if it was delegated to this user and holds no other process
// (sandbash then moves itself into a leaf of it, since a v2 cgroup with
// controllers enabled for its children cannot hold processes).
func v2Hierarchy(mnt string, v1 *cgroups) (*hierarchy, string, error) {
	avail := strings.Fields(readString(filepath.Join(mnt, "cgroup.controllers")))
	var want []string
	for _, ctrl := range cgroupControllers {
		if !v1.has(ctrl) && slices.Contains(avail, ctrl) {
			want = append(want, ctrl)
		}
	}
	if len(want) == 0 {
		return nil, "", nil
	}
	if os.Geteuid() == 0 {
		base := filepath.Join(mnt, "sandbash")
		if err := usableDir(base); err != nil {
			return nil, "", err
		}
		on, err := enableEach([]string{mnt, base}, want)
		if err != nil {
			return nil, "", err
		}
		return &hierarchy{v2: true, base: base, ctrls: on}, "", nil
	}
	own := ownCgroupV2()
	if own == "" {
		return nil, "", errors.New("cannot find this process's cgroup in /proc/self/cgroup")
	}
	dir := filepath.Join(mnt, own)
	if unix.Access(dir, unix.W_OK|unix.X_OK) != nil || unix.Access(filepath.Join(dir, "cgroup.subtree_control"), unix.W_OK) != nil {
		return nil, "", fmt.Errorf("this process's cgroup %s is not delegated to uid %d; run sandbash in a delegated scope, e.g. `systemd-run --user --scope -p Delegate=yes sandbash ...`", dir, os.Geteuid())
	}
	procs := strings.Fields(readString(filepath.Join(dir, "cgroup.procs")))
	if len(procs) != 1 || procs[0] != strconv.Itoa(os.Getpid()) {
		return nil, "", fmt.Errorf("this process's cgroup %s is delegated but holds other processes too; run sandbash in a scope of its own, e.g. `systemd-run --user --scope -p Delegate=yes sandbash ...`", dir)
	}
	self := filepath.Join(dir, "sandbash-self")
	if err := usableDir(self); err != nil {
		return nil, "", err
	}
	if err := writeFile(filepath.Join(self, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return nil, "", err
	}
	on, err := enableEach([]string{dir}, want)
	if err != nil {
		return nil, self, err
	}
	return &hierarchy{v2: true, base: dir, ctrls: on}, self, nil
}

// enableEach enables each controller of want for the children of every
// dir (parents first), and returns those it could: one the host refuses
// (cpu, when a realtime process holds it) leaves the others in use.
func enableEach(dirs, want []string) ([]string, error) {
	var on []string
	var errs []error
	for _, ctrl := range want {
		var err error
		for _, d := range dirs {
			if err = enableControllers(d, []string{ctrl}); err != nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		on = append(on, ctrl)
	}
	if !slices.Contains(on, "memory") && !slices.Contains(on, "pids") {
		return nil, errors.Join(errs...)
	}
	return on, nil
}

// ownCgroupV2 is this process's v2 cgroup path ("0::/path"), or "".
func ownCgroupV2() string {
	for _, l := range strings.Split(readString("/proc/self/cgroup"), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	return ""
}

// enableControllers makes ctrls available to dir's children.
func enableControllers(dir string, ctrls []string) error {
	on := strings.Fields(readString(filepath.Join(dir, "cgroup.subtree_control")))
	var add []string
	for _, c := range ctrls {
		if !slices.Contains(on, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	return writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(add, " "))
}

// readString reads a small file of the kernel's (procfs, cgroupfs),
// trimmed, or "" if it cannot. Plain system calls: os.ReadFile would also
// stat the file and offer it to Go's poller (which takes cgroupfs files,
// with two fcntl calls besides), several calls more for each of the
// dozens of such files a call reads and writes.
func readString(p string) string {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if n <= 0 || err != nil {
			break
		}
		out = append(out, buf[:n]...)
	}
	return strings.TrimSpace(string(out))
}

// writeFile writes v to the kernel's file p (a cgroup's), with plain
// system calls as readString reads.
func writeFile(p, v string) error {
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	var n int
	for {
		n, err = unix.Write(fd, []byte(v))
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err == nil && n != len(v) {
		err = io.ErrShortWrite
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %q to %s: %w", v, p, err)
	}
	return nil
}

// sessionCgroupName is a session's directory under each base: its owner
// (this process) and its id, made safe for a file name.
func sessionCgroupName(id string) string {
	safe := strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, id)
	pid := os.Getpid()
	return fmt.Sprintf("%d.%d.%s", pid, startTime(pid), safe)
}

// ownerGone reports whether the sandbash that created a session directory
// named name has exited. Names not of that form are not sandbash's.
func ownerGone(name string) bool {
	parts := strings.SplitN(name, ".", 3)
	if len(parts) != 3 {
		return false
	}
	pid, err1 := strconv.Atoi(parts[0])
	start, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return startTime(pid) != start
}

// startTime is field 22 of /proc/PID/stat, or 0 if the process is gone.
func startTime(pid int) uint64 { return owner.StartTime(pid) }

// removeStale removes the session cgroups that sandbash processes which
// died left under each base. It returns what it removed, and what it could
// not (a process still in it).
func (c *cgroups) removeStale() (removed, left []string) {
	for _, h := range c.hs {
		entries, _ := os.ReadDir(h.base)
		for _, e := range entries {
			if !e.IsDir() || !ownerGone(e.Name()) {
				continue
			}
			dir := filepath.Join(h.base, e.Name())
			if err := removeTree(dir); err != nil {
				left = append(left, err.Error())
			} else {
				removed = append(removed, dir)
			}
		}
	}
	return removed, left
}

// removeTree removes a dead sandbash's cgroup and its children, deepest
// first (a cgroup directory holds only the kernel's files, which rmdir
// takes along). Whatever still runs in them is what is left of that
// sandbash's calls (a bwrap killed with its parent takes a moment to go):
// it is killed, and removal waits a little for it to be gone.
func removeTree(dir string) error {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	for _, p := range strings.Fields(readString(filepath.Join(dir, "cgroup.procs"))) {
		if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
	return removeCgroup(dir)
}

// removeCgroup removes one empty cgroup. The last process of a call may
// still be on its way out when the call ends (its exit is reported before
// the kernel detaches it), so EBUSY is retried for a short while.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := unix.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY) && time.Now().Before(deadline):
			time.Sleep(5 * time.Millisecond)
		default:
			return fmt.Errorf("removing cgroup %s: %w (processes in it: %s)", dir, err, readString(filepath.Join(dir, "cgroup.procs")))
		}
	}
}

// callCgroup is one call's cgroups, one directory per hierarchy.
type callCgroup struct {
	c    *cgroups
	dirs []string // parallel to c.hs
	// born[i]: the call's program was started in dirs[i]
	// (enterThread, or clone3 into the v2 one), so join leaves it alone.
	born []bool
	// v2fd is the v2 cgroup directory opened, for clone3, until the
	// program started; -1 if none.
	v2fd, v2 int // and its index in dirs
}

// newCall creates the cgroups of a session's next call and sets l in them.
func (c *cgroups) newCall(session, call string, l backend.Limits) (*callCgroup, error) {
	cc := &callCgroup{c: c, v2fd: -1, v2: -1}
	for _, h := range c.hs {
		sdir := filepath.Join(h.base, session)
		if err := os.Mkdir(sdir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cc.remove()
			return nil, err
		}
		if h.v2 {
			if err := enableControllers(sdir, h.ctrls); err != nil {
				cc.remove()
				return nil, err
			}
		}
		dir := filepath.Join(sdir, call)
		if err := os.Mkdir(dir, 0o755); err != nil {
			cc.remove()
			return nil, err
		}
		cc.dirs = append(cc.dirs, dir)
		if err := h.set(dir, l); err != nil {
			cc.remove()
			return nil, err
		}
		if h.v2 {
			fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				cc.remove()
				return nil, err
			}
			cc.v2fd, cc.v2 = fd, len(cc.dirs)-1
		}
	}
	cc.born = make([]bool, len(cc.dirs))
	return cc, nil
}

// v2FD is the call's v2 cgroup, opened for clone3, or -1.
func (cc *callCgroup) v2FD() int {
	if cc == nil {
		return -1
	}
	return cc.v2fd
}

// closeV2FD closes the v2 cgroup's descriptor once the program started
// (or did not).
func (cc *callCgroup) closeV2FD() {
	if cc != nil && cc.v2fd >= 0 {
		unix.Close(cc.v2fd)
		cc.v2fd = -1
	}
}

// bornV2 records that the program was started in the v2 cgroup.
func (cc *callCgroup) bornV2() {
	if cc != nil && cc.v2 >= 0 && cc.v2 < len(cc.born) {
		cc.born[cc.v2] = true
	}
}

// set writes l's limits for h's controllers into the cgroup dir.
func (h hierarchy) set(dir string, l backend.Limits) error {
	var w [][2]string // file, value, in order
	for _, ctrl := range h.ctrls {
		switch {
		case ctrl == "memory" && h.v2:
			w = append(w, [2]string{"memory.max", strconv.FormatInt(l.Memory, 10)})
			if exists(filepath.Join(dir, "memory.swap.max")) {
				w = append(w, [2]string{"memory.swap.max", "0"})
			}
		case ctrl == "memory":
			w = append(w, [2]string{"memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
			if exists(filepath.Join(dir, "memory.memsw.limit_in_bytes")) {
				w = append(w, [2]string{"memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10)})
			}
		case ctrl == "pids":
			w = append(w, [2]string{"pids.max", strconv.FormatInt(l.Pids, 10)})
		case ctrl == "cpu" && h.v2:
			w = append(w, [2]string{"cpu.max", fmt.Sprintf("%d %d", cpuQuota(l.CPUs), cpuPeriod)})
		case ctrl == "cpu":
			w = append(w, [2]string{"cpu.cfs_period_us", strconv.Itoa(cpuPeriod)}, [2]string{"cpu.cfs_quota_us", strconv.FormatInt(cpuQuota(l.CPUs), 10)})
		}
	}
	for _, kv := range w {
		if err := writeFile(filepath.Join(dir, kv[0]), kv[1]); err != nil {
			return err
		}
	}
	return nil
}

const cpuPeriod = 100000 // microseconds

func cpuQuota(cpus float64) int64 { return int64(cpus * cpuPeriod) }

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// join moves process pid into those of the call's cgroups it was not
// born in.
func (cc *callCgroup) join(pid int) error {
	for i, dir := range cc.dirs {
		if i < len(cc.born) && cc.born[i] {
			continue
		}
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// A process is born in the cgroups of the thread that forks it. Moving a
// process into a cgroup (join) takes a lock that waits for an RCU grace
// period, milliseconds, unless another move came just before; a thread
// moving itself in cgroup v1 (writing 0 to tasks) does not take it. So
// the launcher thread (keyring.go) steps into the call's v1 cgroups,
// starts the launcher, and steps back out: the launcher is born inside,
// and nothing of the call ever runs outside. The thread is in the call's
// cgroups only while it forks; sandbash's memory is charged to its own
// cgroup throughout (v1 charges a process's memory to its main thread's).
// A v2 cgroup holds whole processes; but clone3 creates one in the cgroup
// it is given (CLONE_INTO_CGROUP), which takes no such lock either. Where
// neither works (no clone3; a v1 mount that does not show this thread's
// own cgroup, to come back to), a launcher starts instead and waits until
// it was moved (join).

// enterThread moves the calling thread, locked to it, into the call's v1
// cgroups; leave moves it back where it was. leave is nil if it entered
// none; it is not nil, even with an error, if it entered some. The
// thread's own cgroups are looked up (and checked to exist) before it
// moves, so that it can come back; where one cannot be, it moves nowhere
// and fails with errNotBorn.
func (cc *callCgroup) enterThread() (leave func() error, err error) {
	self := threadCgroups()
	var homes []string
	var entered []int
	for i, h := range cc.c.hs {
		if h.v2 || i >= len(cc.dirs) {
			continue
		}
		home := h.threadDir(self)
		if home == "" {
			return nil, errNotBorn
		}
		homes = append(homes, home)
		entered = append(entered, i)
	}
	if len(entered) == 0 {
		return nil, nil
	}
	var done []string
	leave = func() error {
		var errs []error
		for _, home := range slices.Backward(done) {
			if err := writeFile(filepath.Join(home, "tasks"), "0"); err != nil {
				errs = append(errs, fmt.Errorf("moving the launcher thread back to its cgroup: %w", err))
			}
		}
		return errors.Join(errs...)
	}
	for j, i := range entered {
		if err := writeFile(filepath.Join(cc.dirs[i], "tasks"), "0"); err != nil {
			if len(done) == 0 {
				leave = nil
			}
			return leave, fmt.Errorf("bwrap: moving the launcher thread into the call's cgroup: %w", err)
		}
		done = append(done, homes[j])
	}
	for _, i := range entered {
		cc.born[i] = true
	}
	return leave, nil
}

// threadDir is the directory of the calling thread's cgroup in the v1
// hierarchy h (self is threadCgroups), if its mount shows it and the
// thread can move itself back into it; "" otherwise.
func (h hierarchy) threadDir(self map[string]string) string {
	p, ok := self[h.ctrls[0]]
	if !ok || h.mount == "" || strings.Contains(p, "/..") {
		return ""
	}
	rel, ok := strings.CutPrefix(p, h.root)
	if !ok || h.root != "/" && rel != "" && rel[0] != '/' {
		return "" // the mount does not show this thread's cgroup
	}
	dir := filepath.Join(h.mount, rel)
	if unix.Access(filepath.Join(dir, "tasks"), unix.W_OK) != nil {
		return ""
	}
	return dir
}

// threadCgroups maps each v1 controller to the calling thread's cgroup
// path in its hierarchy (/proc/thread-self/cgroup).
func threadCgroups() map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(readString("/proc/thread-self/cgroup"), "\n") {
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[1] == "" {
			continue
		}
		for _, ctrl := range strings.Split(f[1], ",") {
			m[ctrl] = f[2]
		}
	}
	return m
}

// oomKills is how many of the call's processes the memory limit killed.
func (cc *callCgroup) oomKills() int {
	for i, h := range cc.c.hs {
		if !slices.Contains(h.ctrls, "memory") || i >= len(cc.dirs) {
			continue
		}
		file := "memory.oom_control" // v1: "oom_kill N" since Linux 4.13
		if h.v2 {
			file = "memory.events"
		}
		for _, l := range strings.Split(readString(filepath.Join(cc.dirs[i], file)), "\n") {
			if v, ok := strings.CutPrefix(l, "oom_kill "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
	}
	return 0
}

// killAll kills whatever is still in the call's cgroups once bwrap is
// gone: nothing should be (the sandbox's PID namespace went with its
// init), but a child bwrap made and never let go on (bwrap killed at the
// wrong moment) waits forever outside it. Never this process, whose
// launcher thread is in a call's cgroups while it forks.
func (cc *callCgroup) killAll() {
	self := os.Getpid()
	for _, dir := range cc.dirs {
		for _, f := range strings.Fields(readString(filepath.Join(dir, "cgroup.procs"))) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != self {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
	}
}

// remove removes the call's cgroups; every process of the call is gone.
func (cc *callCgroup) remove() error {
	cc.closeV2FD()
	var errs []error
	for _, dir := range cc.dirs {
		errs = append(errs, removeCgroup(dir))
	}
	return errors.Join(errs...)
}

// removeSession removes a session's cgroups once its calls' are gone.
func (c *cgroups) removeSession(session string) error {
	var errs []error
	for _, h := range c.hs {
		errs = append(errs, removeCgroup(filepath.Join(h.base, session)))
	}
	return errors.Join(errs...)
}
