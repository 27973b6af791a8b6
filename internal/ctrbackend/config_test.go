package ctrbackend

import (
	"io"
	"strings"
	"testing"
)

func TestNewConfig(t *testing.T) {
	c, err := NewConfig()
	if err != nil || c.PoolSize != 1 || c.Progress != io.Discard || c.Limits != DefaultLimits() || c.Host != "" {
		t.Errorf("NewConfig() = %+v, %v; want the defaults", c, err)
	}
	l := DefaultLimits()
	l.Pids = 77
	c, err = NewConfig(WithPoolSize(0), WithLimits(l), WithHost("unix:///x.sock"), WithProgress(io.Discard))
	if err != nil || c.PoolSize != 0 || c.Limits.Pids != 77 || c.Host != "unix:///x.sock" {
		t.Errorf("NewConfig(options) = %+v, %v", c, err)
	}
}

// A value an option cannot take fails New instead of being changed
// silently (a negative pool used to be clamped to 0).
func TestOptionsFail(t *testing.T) {
	bad := DefaultLimits()
	bad.Memory = 1
	for _, tc := range []struct {
		name string
		opt  Option
		want string
	}{
		{"negative pool", WithPoolSize(-1), "pool size -1"},
		{"limits", WithLimits(bad), "memory limit"},
		{"nil progress", WithProgress(nil), "progress"},
	} {
		if _, err := NewConfig(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: NewConfig = %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
