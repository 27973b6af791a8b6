package ctrbackend

import (
	"context"
	"errors"
	"sync"
)

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("container: warm pool closed")

// Pool keeps up to Size single-use units (started containers waiting for
// their one call) ready. Get hands one out and starts preparing a
// replacement; a unit is never handed out twice. Ready plus in-preparation
// units never exceed Size, so an idle pool holds at most Size containers.
// Close discards every ready unit and waits for preparations under way,
// discarding them too.
type Pool[T any] struct {
	size    int
	prepare func(context.Context) (T, error)
	discard func(T)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	ready    []T
	inflight int
	lastErr  error
	closed   bool
	changed  chan struct{} // closed and replaced on every state change
}

// NewPool returns a pool that starts filling at once. prepare is called
// with a context that Close cancels; discard releases a unit that will never
// be handed out. A size of 0 keeps nothing warm: Get prepares a unit when
// asked, and nothing is prepared ahead (for one-shot sessions).
func NewPool[T any](size int, prepare func(context.Context) (T, error), discard func(T)) *Pool[T] {
	size = max(size, 0)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool[T]{size: size, prepare: prepare, discard: discard, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	return p
}

// fill starts preparations up to size. Call with mu held.
func (p *Pool[T]) fill() {
	for !p.closed && len(p.ready)+p.inflight < p.size {
		p.startOne()
	}
}

func (p *Pool[T]) startOne() {
	p.inflight++
	p.wg.Add(1)
	go p.prepareOne()
}

func (p *Pool[T]) prepareOne() {
	defer p.wg.Done()
	u, err := p.prepare(p.ctx)
	p.mu.Lock()
	p.inflight--
	late := err == nil && p.closed
	switch {
	case err != nil:
		// Not refilled here, so a broken image does not spin; the next
		// Get reports the error and tries again.
		p.lastErr = err
	case !late:
		p.ready = append(p.ready, u)
	}
	p.notify()
	p.mu.Unlock()
	if late {
		p.discard(u)
	}
}

func (p *Pool[T]) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Get returns a ready unit, waiting for one being prepared if needed. The
// caller owns it from then on.
func (p *Pool[T]) Get(ctx context.Context) (T, error) {
	var zero T
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return zero, ErrPoolClosed
		}
		if len(p.ready) > 0 {
			u := p.ready[0]
			p.ready = p.ready[1:]
			p.fill()
			p.mu.Unlock()
			return u, nil
		}
		if p.lastErr != nil && p.inflight == 0 {
			err := p.lastErr
			p.lastErr = nil
			p.mu.Unlock()
			return zero, err
		}
		if p.inflight == 0 {
			p.startOne()
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return zero, ctx.Err()
		}
	}
}

// WaitFull waits until the pool holds Size ready units, or a preparation
// failed.
func (p *Pool[T]) WaitFull(ctx context.Context) error {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return ErrPoolClosed
		case len(p.ready) >= p.size && p.inflight == 0:
			p.mu.Unlock()
			return nil
		case p.lastErr != nil && p.inflight == 0:
			err := p.lastErr
			p.mu.Unlock()
			return err
		}
		p.fill()
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close discards the ready units, cancels and waits for preparations under
// way, and discards what they produce. It is idempotent.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.cancel()
	p.notify()
	p.mu.Unlock()
	for _, u := range ready {
		p.discard(u)
	}
	p.wg.Wait()
}
