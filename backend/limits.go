package backend

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Limits bound each call. Every backend applies them; how (cgroups,
// rlimits) is the backend's to say.
type Limits struct {
	// Memory in bytes for the call as a whole, tmpfs included (no swap
	// beyond it).
	Memory int64
	// CPUs, fractional.
	CPUs float64
	// Pids is the most processes and threads the call may have.
	Pids int64
	// NoFile is the open-file limit, soft and hard (container backends).
	NoFile int64
	// NProc is the per-user process limit, soft and hard (container
	// backends).
	NProc int64
	// FileSize is the largest file a call's process may write, in bytes
	// (RLIMIT_FSIZE); 0 means no limit.
	FileSize int64
}

// DefaultFileSize is the default FileSize: larger than any file a build
// or test run normally writes, small enough that one runaway file does not
// fill a disk.
const DefaultFileSize = 16 << 30

// DefaultLimits: 4 GiB of memory, 2 CPUs (or all, if fewer), 4096 pids,
// 65536 open files and 32768 processes per user (Podman's service caps its
// own at 32768), files of at most 16 GiB, or this process's own hard
// limits where those are lower: a runtime cannot raise a limit past the
// hard limit it runs under ("error setting rlimit type 7").
func DefaultLimits() Limits {
	return Limits{
		Memory:   4 << 30,
		CPUs:     float64(min(2, runtime.NumCPU())),
		Pids:     4096,
		NoFile:   hardLimit(unix.RLIMIT_NOFILE, 65536),
		NProc:    hardLimit(unix.RLIMIT_NPROC, 32768),
		FileSize: hardLimit(unix.RLIMIT_FSIZE, DefaultFileSize),
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
		return fmt.Errorf("memory limit %d bytes: give at least 6 MiB: %w", l.Memory, ErrBadLimits)
	case l.CPUs <= 0 || l.CPUs > float64(runtime.NumCPU()):
		return fmt.Errorf("cpu limit %g: give more than 0 and at most this host's %d CPUs: %w", l.CPUs, runtime.NumCPU(), ErrBadLimits)
	case l.Pids < 16:
		return fmt.Errorf("pids limit %d: give at least 16: %w", l.Pids, ErrBadLimits)
	case l.FileSize < 0:
		return fmt.Errorf("file size limit %d: give 0 (no limit) or a size in bytes: %w", l.FileSize, ErrBadLimits)
	}
	return nil
}
