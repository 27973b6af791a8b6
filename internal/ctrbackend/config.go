package ctrbackend

import (
	"errors"
	"fmt"
	"io"
)

// Config is what the options of a container backend set.
type Config struct {
	// Limits bound each call's container.
	Limits Limits
	// PoolSize is how many warm containers a session keeps ready.
	PoolSize int
	// Progress is where image-pull progress goes.
	Progress io.Writer
	// Host is the engine's address ("" for the engine's usual way of
	// finding it).
	Host string
}

// Option configures a container backend. It fails on a value it cannot
// take, and the backend's New with it.
type Option func(*Config) error

// NewConfig returns the defaults (DefaultLimits, a pool of 1, progress
// nowhere) with opts applied in order.
func NewConfig(opts ...Option) (Config, error) {
	c := Config{Limits: DefaultLimits(), PoolSize: 1, Progress: io.Discard}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// WithLimits sets the per-call resource limits (default DefaultLimits).
func WithLimits(l Limits) Option {
	return func(c *Config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithPoolSize sets how many warm containers a session keeps ready
// (default 1). 0 keeps none: each call creates its container when it
// starts, which suits a session of one call.
func WithPoolSize(n int) Option {
	return func(c *Config) error {
		if n < 0 {
			return fmt.Errorf("warm pool size %d: give 0 or more", n)
		}
		c.PoolSize = n
		return nil
	}
}

// WithProgress sets where image-pull progress goes (default: nowhere).
func WithProgress(w io.Writer) Option {
	return func(c *Config) error {
		if w == nil {
			return errors.New("progress writer is nil: give io.Discard for none")
		}
		c.Progress = w
		return nil
	}
}

// WithHost sets the engine's address (a unix:// or tcp:// URL); "" finds
// it the engine's usual way.
func WithHost(host string) Option {
	return func(c *Config) error {
		c.Host = host
		return nil
	}
}
