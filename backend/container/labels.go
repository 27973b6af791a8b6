package container

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandbash/sandbash/backend"
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

// Limits bound each call's container. It is backend.Limits, which every
// backend shares; the name stays for existing callers.
type Limits = backend.Limits

// DefaultLimits returns backend.DefaultLimits.
func DefaultLimits() Limits { return backend.DefaultLimits() }
