package container

import (
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/internal/owner"
)

// Labels put on everything a container backend creates.
const (
	LabelSession = "sandbash.session" // the session id
	LabelOwner   = "sandbash.owner"   // the owning process: host/boot/pidns/uid/pid/start-time
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

// Owner identifies this process (see package internal/owner): host, boot,
// PID namespace, uid, PID and start time.
func Owner() string { return owner.Self() }

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
