// Package fakebackend is a backend that sandboxes nothing and runs nothing:
// it answers `echo TEXT` with TEXT and `exit N` with status N, and anything
// else with status 127. It is for the root package's examples and unit
// tests, where what matters is what sandbash does around a call.
package fakebackend

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/sandbash/sandbash/backend"
)

// Backend is the fake backend.
type Backend struct{}

var _ backend.Backend = Backend{}

// Name returns "fake".
func (Backend) Name() string { return "fake" }

// Open returns a session; it checks nothing.
func (Backend) Open(ctx context.Context, spec *backend.SessionSpec) (backend.Session, error) {
	return &session{}, nil
}

// Close does nothing.
func (Backend) Close() error { return nil }

type session struct {
	mu     sync.Mutex
	closed bool
}

func (s *session) Start(ctx context.Context, c *backend.Call) (backend.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, backend.ErrClosed
	}
	out, code := "", 127
	switch cmd := strings.TrimSpace(c.Command); {
	case cmd == "echo" || strings.HasPrefix(cmd, "echo "):
		out, code = strings.TrimPrefix(strings.TrimPrefix(cmd, "echo"), " ")+"\n", 0
	case strings.HasPrefix(cmd, "exit "):
		if n, err := strconv.Atoi(strings.TrimPrefix(cmd, "exit ")); err == nil {
			code = n
		}
	default:
		out = fmt.Sprintf("fake: %s: command not found\n", strings.Fields(cmd)[0])
	}
	if c.Output != nil {
		_, _ = c.Output.Write([]byte(out))
	}
	return process{code}, nil
}

func (s *session) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

type process struct{ code int }

func (process) Signal(syscall.Signal) error { return nil }

func (p process) Wait() (backend.Exit, error) { return backend.Exit{Code: p.code}, nil }
