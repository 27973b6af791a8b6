package ctrbackend

import (
	"time"

	"github.com/sandbash/sandbash/backend"
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

// Limits bound each call's container. It is backend.Limits, which every
// backend shares; the name stays for existing callers.
type Limits = backend.Limits

// DefaultLimits returns backend.DefaultLimits.
func DefaultLimits() Limits { return backend.DefaultLimits() }
