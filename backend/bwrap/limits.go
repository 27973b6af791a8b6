package bwrap

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

// How limits are enforced. Where sandbash can create cgroups (as root, or
// in a delegated v2 subtree), each call gets its own, capping its memory
// (tmpfs included), its processes and its CPU as a whole. Elsewhere the
// best a process can do for its children is rlimits, which are per process
// or per user, and say so. Always:
//
//   - RLIMIT_FSIZE caps every file a call writes. The session's /tmp and
//     HOME are host directories that live as long as the session (and, for
//     a CLI session, across sandbash processes), so a size-limited tmpfs
//     cannot replace them; one runaway file cannot fill the disk, though
//     many files still can.
//   - /dev/shm is a tmpfs of half the memory limit, so shared memory fails
//     with ENOSPC before the call's memory runs out, with or without
//     cgroups; the rest of /dev is read-only.

// Enforcement says how a Backend's limits are applied on this host.
type Enforcement struct {
	// Cgroups is "cgroup v1" or "cgroup v2" when calls run in cgroups of
	// their own, "" when sandbash cannot create any here.
	Cgroups string
	// Memory, Pids and CPU: the limit holds for the call as a whole
	// (a cgroup controller enforces it).
	Memory, Pids, CPU bool
	// Summary says, in a sentence, what is capped and how.
	Summary string
}

// enforcer applies a backend's limits to each of its calls.
type enforcer struct {
	l     backend.Limits
	cg    *cgroups // nil: rlimits only
	nocgs string   // why there are no cgroups
	// nprocPerNS: Linux 5.14 and later count RLIMIT_NPROC per user
	// namespace (and check every parent namespace against the limit its
	// creator had), so a limit set inside the sandbox's own user namespace
	// caps the call's processes alone. Earlier kernels count every process
	// of the user.
	nprocPerNS bool
}

// newEnforcer finds the cgroups sandbash can use, if useCgroups. The
// rlimits need nothing: the command's bash sets them on itself (lowering
// one's own limits needs no privilege, while setting another process's
// needs CAP_SYS_RESOURCE when it runs as another user, which root in a
// container often lacks).
func newEnforcer(l backend.Limits, useCgroups bool) (*enforcer, error) {
	e := &enforcer{l: l, nocgs: "disabled", nprocPerNS: kernelAtLeast(5, 14)}
	if useCgroups {
		e.cg, e.nocgs = findCgroups()
	}
	return e, nil
}

func (e *enforcer) enforcement() Enforcement {
	l := e.l
	en := Enforcement{}
	var parts []string
	if e.cg != nil {
		en.Cgroups = e.cg.version()
		en.Memory, en.Pids, en.CPU = e.cg.has("memory"), e.cg.has("pids"), e.cg.has("cpu")
		parts = append(parts, fmt.Sprintf("%s, a cgroup per call under %s", en.Cgroups, e.cg.bases()))
	} else {
		parts = append(parts, "rlimits only, no cgroup ("+e.nocgs+")")
	}
	if en.Memory {
		parts = append(parts, fmt.Sprintf("memory %s per call, tmpfs included, no swap", size(l.Memory)))
	} else {
		parts = append(parts, fmt.Sprintf("memory %s per process (RLIMIT_DATA), not per call", size(l.Memory)))
	}
	switch {
	case en.Pids:
		parts = append(parts, fmt.Sprintf("%d processes and threads per call", l.Pids))
	case e.nprocPerNS:
		parts = append(parts, fmt.Sprintf("%d processes and threads per call (RLIMIT_NPROC in the sandbox's user namespace, which Linux 5.14+ counts per namespace; it does not bind calls that run as root)", l.Pids))
	default:
		parts = append(parts, fmt.Sprintf("%d processes and threads more than the user already has (RLIMIT_NPROC, which before Linux 5.14 counts all of the user's processes; it does not bind calls that run as root)", l.Pids))
	}
	if en.CPU {
		parts = append(parts, fmt.Sprintf("%g CPUs", l.CPUs))
	} else {
		parts = append(parts, "CPU not limited")
	}
	if l.FileSize > 0 {
		parts = append(parts, fmt.Sprintf("files up to %s each (RLIMIT_FSIZE) in /tmp, HOME and everywhere else, but not their total", size(l.FileSize)))
	} else {
		parts = append(parts, "file size not limited")
	}
	parts = append(parts, fmt.Sprintf("/dev/shm %s, /dev read-only", size(shmSize(l))))
	en.Summary = strings.Join(parts, "; ")
	return en
}

// shmSize is the size of a call's /dev/shm: half the memory limit.
func shmSize(l backend.Limits) int64 { return max(l.Memory/2, 1<<20) }

// size renders a byte count: "4 GiB", "1.5 GiB", "64 MiB".
func size(b int64) string {
	for _, u := range []struct {
		n    int64
		name string
	}{{1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		switch {
		case b >= u.n && b%u.n == 0:
			return fmt.Sprintf("%d %s", b/u.n, u.name)
		case b >= u.n:
			return fmt.Sprintf("%.1f %s", float64(b)/float64(u.n), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}

// callLimits are one call's: its cgroups, and the rlimits the command's
// bash sets on itself in the sandbox before it reads the command
// (readerScript).
type callLimits struct {
	cg *callCgroup
	rl rlimits
}

// rlimits are the rlimits of a call whose processes are uid on the host.
func (e *enforcer) rlimits(uid int) rlimits {
	var rl rlimits
	if e.l.FileSize > 0 {
		rl.fsize = belowHard(unix.RLIMIT_FSIZE, e.l.FileSize)
	}
	if e.cg == nil || !e.cg.has("memory") {
		rl.data = belowHard(unix.RLIMIT_DATA, e.l.Memory)
	}
	switch {
	case e.cg != nil && e.cg.has("pids"), uid == 0:
	case e.nprocPerNS:
		rl.nproc = belowHard(unix.RLIMIT_NPROC, e.l.Pids)
	default:
		// The sandbox's user namespace changes nothing here: before
		// Linux 5.14 RLIMIT_NPROC counts all the user's processes.
		rl.nproc = belowHard(unix.RLIMIT_NPROC, threadsOf(uid)+e.l.Pids)
	}
	return rl
}

// newCgroup creates the cgroups of a session's call, with the limits
// set; nil without cgroups.
func (e *enforcer) newCgroup(session, call string) (*callCgroup, error) {
	if e.cg == nil {
		return nil, nil
	}
	cg, err := e.cg.newCall(session, call, e.l)
	if err != nil {
		return nil, fmt.Errorf("bwrap: creating the call's cgroup: %w", err)
	}
	return cg, nil
}

// belowHard is v, or this process's hard limit of res if that is lower:
// raising a hard limit would need privilege, and the sandbox inherits
// this process's.
func belowHard(res int, v int64) int64 {
	var cur unix.Rlimit
	if unix.Getrlimit(res, &cur) == nil && uint64(v) > cur.Max {
		return int64(cur.Max)
	}
	return v
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return versionAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// apply puts the launcher pid, which has not started anything yet, into
// those of the call's cgroups it was not born in (callCgroup.enterThread);
// everything it starts inherits them.
func (cl *callLimits) apply(pid int) error {
	if cl.cg != nil {
		if err := cl.cg.join(pid); err != nil {
			return fmt.Errorf("bwrap: moving the launcher into the call's cgroup: %w", err)
		}
	}
	return nil
}

// finish reports whether the memory limit killed a process of the call,
// and removes its cgroups. Every process of the call is gone.
func (cl *callLimits) finish() (oom bool, err error) {
	if cl == nil || cl.cg == nil {
		return false, nil
	}
	oom = cl.cg.oomKills() > 0
	cl.cg.killAll()
	return oom, cl.cg.remove()
}

// discard removes the call's cgroups when it did not start.
func (cl *callLimits) discard() {
	if cl != nil && cl.cg != nil {
		_ = cl.cg.remove()
	}
}

// threadsOf counts the host's processes and threads whose real uid is uid:
// what RLIMIT_NPROC counts.
func threadsOf(uid int) int64 {
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(uid)
	var n int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		mine := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), ":")
			switch k {
			case "Uid":
				fs := strings.Fields(v)
				mine = len(fs) > 0 && fs[0] == want
			case "Threads":
				if mine {
					t, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					n += t
				}
			}
		}
		f.Close()
	}
	return n
}

// GC removes the cgroups that sandbash processes which died left behind,
// and lists what it removed. Open starts the same alongside a session; GC
// waits for one of those under way rather than start another.
// Those are all this user's (root's, or a delegated scope's): all changes
// nothing.
func (b *Backend) GC(ctx context.Context, all bool) ([]string, error) {
	if b.enf.cg == nil {
		return nil, nil
	}
	sw := b.sweepStale()
	<-sw.done
	removed, left := sw.removed, sw.left
	if len(left) > 0 {
		return removed, fmt.Errorf("bwrap: stale cgroups still hold processes: %s", strings.Join(left, "; "))
	}
	return removed, nil
}

// sweep is one removal of the cgroups dead sandbash processes left
// (cgroups.removeStale): done is closed when it is over.
type sweep struct {
	done          chan struct{}
	removed, left []string
}

// sweepStale starts a removal of the cgroups dead sandbash processes
// left, or returns the one under way: a one-shot run's Open and the CLI's
// GC alongside it would otherwise both read every session's cgroups.
func (b *Backend) sweepStale() *sweep {
	b.sweepMu.Lock()
	defer b.sweepMu.Unlock()
	if sw := b.sweeping; sw != nil {
		select {
		case <-sw.done:
		default:
			return sw
		}
	}
	sw := &sweep{done: make(chan struct{})}
	b.sweeping = sw
	go func() {
		defer close(sw.done)
		sw.removed, sw.left = b.enf.cg.removeStale()
	}()
	return sw
}
