package container

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Labels put on everything a container backend creates.
const (
	LabelSession = "sandbash.session" // the session id
	LabelOwner   = "sandbash.owner"   // host/pid/start-time of the owning process
	LabelCreated = "sandbash.created" // RFC 3339 creation time
)

// Labels returns the labels for a session's objects.
func Labels(sessionID string) map[string]string {
	return map[string]string{
		LabelSession: sessionID,
		LabelOwner:   Owner(),
		LabelCreated: time.Now().UTC().Format(time.RFC3339),
	}
}

// Owner identifies this process across PID reuse: host name, PID and the
// process's start time in clock ticks since boot.
func Owner() string {
	host, _ := os.Hostname()
	pid := os.Getpid()
	return fmt.Sprintf("%s/%d/%d", host, pid, startTime(pid))
}

// OwnerGone reports whether the process an owner label names has exited.
// It is false for a live owner and for an owner on another host, which
// cannot be checked from here.
func OwnerGone(owner string) bool {
	parts := strings.Split(owner, "/")
	if len(parts) != 3 {
		return false
	}
	if host, _ := os.Hostname(); parts[0] != host {
		return false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return startTime(pid) != start
}

// startTime is field 22 of /proc/PID/stat, or 0 if the process is gone.
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after it follow
	// its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// Limits bound each call's container.
type Limits struct {
	// Memory in bytes (no swap beyond it).
	Memory int64
	// CPUs, fractional.
	CPUs float64
	// Pids is the most processes and threads the call may have.
	Pids int64
	// NoFile is the open-file limit, soft and hard.
	NoFile int64
	// NProc is the per-user process limit, soft and hard.
	NProc int64
}

// DefaultLimits: 4 GiB of memory, 2 CPUs (or all, if fewer), 4096 pids,
// 65536 open files and 32768 processes per user (Podman's service caps its
// own at 32768), or this process's own hard limits where those are lower: a
// runtime cannot raise a limit past the hard limit it runs under ("error
// setting rlimit type 7").
func DefaultLimits() Limits {
	return Limits{
		Memory: 4 << 30,
		CPUs:   float64(min(2, runtime.NumCPU())),
		Pids:   4096,
		NoFile: hardLimit(unix.RLIMIT_NOFILE, 65536),
		NProc:  hardLimit(unix.RLIMIT_NPROC, 32768),
	}
}

func hardLimit(resource int, want int64) int64 {
	var r unix.Rlimit
	if err := unix.Getrlimit(resource, &r); err != nil || r.Max >= uint64(want) {
		return want
	}
	return int64(r.Max)
}

// Validate checks limits given by a user.
func (l Limits) Validate() error {
	switch {
	case l.Memory < 6<<20:
		return fmt.Errorf("memory limit %d bytes: give at least 6 MiB (e.g. --memory 512m)", l.Memory)
	case l.CPUs <= 0 || l.CPUs > float64(runtime.NumCPU()):
		return fmt.Errorf("cpu limit %g: give more than 0 and at most this host's %d CPUs", l.CPUs, runtime.NumCPU())
	case l.Pids < 16:
		return fmt.Errorf("pids limit %d: give at least 16", l.Pids)
	}
	return nil
}
