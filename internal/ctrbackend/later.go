package ctrbackend

import (
	"sync"
	"time"
)

// Later holds back the exit and removal of containers whose calls ended by
// themselves, while the backend prepares containers for the next calls:
// on an engine busy starting containers (back-to-back calls), each exit and
// removal competes with them for the engine's locks and CPU (with Podman,
// 20 calls with no pause between them took 75-118 ms each with their
// removals, 52-58 without). Such a container holds no process of its call
// any more: its supervisor, PID 1, killed every other one before it
// reported, and exits once its stdin ends (the held removal closes it) or
// after 3 s with no heartbeat; then only the engine's record of it and its
// empty writable layer are left.
//
// A held removal runs as soon as no preparation is under way (the
// sessions' pools are full), or once it has waited Delay, whichever comes
// first, one at a time; at most Max wait, and the removal after those runs
// at once. A session's Close hurries its own (see [Later.Hurry]): Close
// still returns with every container of the session gone.
type Later struct {
	max   int
	delay time.Duration

	mu      sync.Mutex
	busy    int // preparations under way
	queue   []*held
	running bool          // the goroutine that runs held removals
	changed chan struct{} // closed and replaced when busy falls to 0
}

// LaterOwner is what [Later.Hurry] hurries: one per session.
type LaterOwner struct {
	hurried bool // guarded by Later.mu
}

type held struct {
	owner *LaterOwner
	at    time.Time
	run   func()
	done  chan struct{}
}

// NewLater returns a Later that holds at most max removals, each for at
// most delay.
func NewLater(max int, delay time.Duration) *Later {
	return &Later{max: max, delay: delay, changed: make(chan struct{})}
}

// Busy marks a container preparation under way; call the function it
// returns when it is over.
func (l *Later) Busy() func() {
	l.mu.Lock()
	l.busy++
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if l.busy--; l.busy == 0 {
				close(l.changed)
				l.changed = make(chan struct{})
			}
			l.mu.Unlock()
		})
	}
}

// Do runs remove on owner's behalf, later (see [Later]), and returns once it
// has run. It runs it at once when Max removals wait already or owner was
// hurried.
func (l *Later) Do(owner *LaterOwner, remove func()) {
	l.mu.Lock()
	if owner.hurried || len(l.queue) >= l.max {
		l.mu.Unlock()
		remove()
		return
	}
	h := &held{owner: owner, at: time.Now(), run: remove, done: make(chan struct{})}
	l.queue = append(l.queue, h)
	if !l.running {
		l.running = true
		go l.loop()
	}
	l.mu.Unlock()
	<-h.done
}

// loop runs the held removals, oldest first, each once nothing is being
// prepared or it has waited Delay.
func (l *Later) loop() {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		h := l.queue[0]
		wait := time.Until(h.at.Add(l.delay))
		if l.busy > 0 && wait > 0 {
			ch := l.changed
			l.mu.Unlock()
			t := time.NewTimer(wait)
			select {
			case <-ch:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		l.queue = l.queue[1:]
		l.mu.Unlock()
		h.run()
		close(h.done)
	}
}

// Hurry runs owner's held removals now, together, and returns once they
// ran; owner's later removals then run at once (Do). Removals of owner
// that loop has taken already end on their own: Do returns once they
// did.
func (l *Later) Hurry(owner *LaterOwner) {
	l.mu.Lock()
	owner.hurried = true
	var mine []*held
	rest := l.queue[:0]
	for _, h := range l.queue {
		if h.owner == owner {
			mine = append(mine, h)
		} else {
			rest = append(rest, h)
		}
	}
	clear(l.queue[len(rest):])
	l.queue = rest
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, h := range mine {
		wg.Go(func() {
			h.run()
			close(h.done)
		})
	}
	wg.Wait()
}
