package ctrbackend

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("container: warm pool closed")

// Pool keeps single-use units (started containers waiting for their one
// call) ready. Get hands one out and starts preparing a replacement; a unit
// is never handed out twice. Ready plus in-preparation units never exceed
// the pool's target, which starts at Size.
//
// The target adapts to back-to-back calls (see [Pool.Grow]): each Get that
// finds nothing ready (calls arrive faster than one unit is prepared)
// doubles it, up to the pool's maximum, so that several units are prepared
// at once; after a quiet spell with no Get it falls back to Size, and the
// ready units beyond it are discarded. So a pool idle for that long holds at
// most Size containers, and never more than its maximum.
// Close discards every ready unit and waits for preparations under way,
// discarding them too.
type Pool[T any] struct {
	size    int
	prepare func(context.Context) (T, error)
	discard func(T)

	max    int           // the target's bound (>= size)
	idle   time.Duration // quiet time after which the target falls to size
	budget *Budget       // shared by pools: each unit of target above size takes one
	target int           // size <= target <= max; guarded by mu
	drop   int           // preparations under way to discard (fallBack)
	shrink *time.Timer   // falls back to size after idle; guarded by mu

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
	p := &Pool[T]{size: size, max: size, target: size, prepare: prepare, discard: discard, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	p.mu.Lock()
	p.fill()
	p.mu.Unlock()
	return p
}

// Budget bounds how far the pools that share it grow, together: each unit
// of a pool's target above its size takes one of its n tokens, so that many
// sessions with back-to-back calls do not start more containers at once
// than the engine can start. The zero value allows no growth.
type Budget struct {
	mu   sync.Mutex
	free int
}

// NewBudget returns a budget of n tokens.
func NewBudget(n int) *Budget { return &Budget{free: n} }

func (b *Budget) take() bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free <= 0 {
		return false
	}
	b.free--
	return true
}

func (b *Budget) give(n int) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
}

// Grow lets the pool's target rise above its size, up to max, while calls
// come back to back and budget has tokens, and fall back to its size after
// idle with no Get. A pool of size 0 (one-shot sessions) never grows.
func (p *Pool[T]) Grow(max int, idle time.Duration, budget *Budget) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size > 0 && max > p.size && budget != nil {
		p.max, p.idle, p.budget = max, idle, budget
	}
}

// fill starts preparations up to the target. Call with mu held.
func (p *Pool[T]) fill() {
	for !p.closed && len(p.ready)+p.inflight < p.target {
		p.startOne()
	}
}

// missed doubles the target (up to max, a budget token for each unit
// above size) after a Get found nothing ready. Call with mu held.
func (p *Pool[T]) missed() {
	for want := min(p.max, 2*p.target); p.target < want && p.budget.take(); {
		p.target++
	}
	p.drop = 0
}

// used restarts the quiet-time clock of a grown pool. Call with mu held.
func (p *Pool[T]) used() {
	if p.target == p.size {
		return
	}
	if p.shrink == nil {
		p.shrink = time.AfterFunc(p.idle, p.fallBack)
		return
	}
	p.shrink.Reset(p.idle)
}

// fallBack returns the target to size after a quiet spell and discards the
// ready units beyond it; preparations under way beyond it are discarded
// when they finish.
func (p *Pool[T]) fallBack() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.budget.give(p.target - p.size)
	p.target = p.size
	var extra []T
	if n := len(p.ready) - p.size; n > 0 {
		extra = append(extra, p.ready[p.size:]...)
		clear(p.ready[p.size:])
		p.ready = p.ready[:p.size]
	}
	p.drop = max(0, len(p.ready)+p.inflight-p.size)
	p.notify()
	p.mu.Unlock()
	for _, u := range extra {
		p.discard(u)
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
	// Late: the pool closed, or fell back to its size meanwhile.
	late := err == nil && (p.closed || p.drop > 0)
	if late && !p.closed {
		p.drop--
	}
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
	for first := true; ; first = false {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return zero, ErrPoolClosed
		}
		if len(p.ready) > 0 {
			u := p.ready[0]
			p.ready = p.ready[1:]
			p.fill()
			p.used()
			p.mu.Unlock()
			return u, nil
		}
		if first && p.lastErr == nil {
			p.missed()
			p.fill()
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

// WaitFull waits until the pool holds as many ready units as its target
// (Size, unless back-to-back calls raised it), or a preparation failed.
func (p *Pool[T]) WaitFull(ctx context.Context) error {
	for {
		p.mu.Lock()
		switch {
		case p.closed:
			p.mu.Unlock()
			return ErrPoolClosed
		case len(p.ready) >= p.target && p.inflight == 0:
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
	if p.shrink != nil {
		p.shrink.Stop()
	}
	if p.target > p.size {
		p.budget.give(p.target - p.size)
		p.target = p.size
	}
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
