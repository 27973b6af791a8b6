package ctrbackend

import (
	"sync/atomic"
	"testing"
	"time"
)

// doLater calls Do with a removal that counts itself in n, and returns a
// channel closed once Do returned.
func doLater(l *Later, o *LaterOwner, n *atomic.Int32) chan struct{} {
	done := make(chan struct{})
	go func() {
		l.Do(o, func() { n.Add(1) })
		close(done)
	}()
	return done
}

func isClosed(ch chan struct{}, within time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(within):
		return false
	}
}

// TestLaterWaitsWhileBusy: a removal waits while a preparation is under
// way and runs once none is; with none under way it runs at once.
func TestLaterWaitsWhileBusy(t *testing.T) {
	l := NewLater(4, time.Hour)
	var o LaterOwner
	var n atomic.Int32
	if !isClosed(doLater(l, &o, &n), 5*time.Second) || n.Load() != 1 {
		t.Fatal("with nothing being prepared, a removal did not run at once")
	}
	idle := l.Busy()
	done := doLater(l, &o, &n)
	if isClosed(done, 200*time.Millisecond) || n.Load() != 1 {
		t.Fatal("a removal ran while a container was being prepared")
	}
	idle()
	idle() // a second call changes nothing
	if !isClosed(done, 5*time.Second) || n.Load() != 2 {
		t.Fatal("a held removal did not run once the preparation ended")
	}
}

// TestLaterDelay: a removal held while preparations go on runs after Delay.
func TestLaterDelay(t *testing.T) {
	l := NewLater(4, 300*time.Millisecond)
	defer l.Busy()()
	var o LaterOwner
	var n atomic.Int32
	start := time.Now()
	if !isClosed(doLater(l, &o, &n), 5*time.Second) {
		t.Fatal("a removal held while the backend stays busy never ran")
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("a held removal ran after %v, before its delay", d)
	}
}

// TestLaterMax: at most Max removals wait; the next runs at once.
func TestLaterMax(t *testing.T) {
	l := NewLater(2, time.Hour)
	idle := l.Busy()
	var o LaterOwner
	var n atomic.Int32
	a, b := doLater(l, &o, &n), doLater(l, &o, &n)
	time.Sleep(100 * time.Millisecond)
	if n.Load() != 0 {
		t.Fatal("a removal ran while a container was being prepared")
	}
	if !isClosed(doLater(l, &o, &n), 5*time.Second) || n.Load() != 1 {
		t.Fatal("with Max removals held, one more was held too")
	}
	idle()
	if !isClosed(a, 5*time.Second) || !isClosed(b, 5*time.Second) || n.Load() != 3 {
		t.Fatal("the held removals did not run once the backend was idle")
	}
}

// TestLaterHurry: Hurry runs its owner's held removals at once, and its
// later ones at once, and leaves other owners' held.
func TestLaterHurry(t *testing.T) {
	l := NewLater(8, time.Hour)
	idle := l.Busy()
	var mine, other LaterOwner
	var n, m atomic.Int32
	a, b := doLater(l, &mine, &n), doLater(l, &other, &m)
	c := doLater(l, &mine, &n)
	time.Sleep(100 * time.Millisecond)
	l.Hurry(&mine)
	if !isClosed(a, time.Second) || !isClosed(c, time.Second) || n.Load() != 2 {
		t.Fatal("Hurry returned before its owner's held removals ran")
	}
	if !isClosed(doLater(l, &mine, &n), 5*time.Second) || n.Load() != 3 {
		t.Fatal("a removal of a hurried owner was held")
	}
	if isClosed(b, 100*time.Millisecond) || m.Load() != 0 {
		t.Fatal("Hurry ran another owner's removal")
	}
	idle()
	if !isClosed(b, 5*time.Second) {
		t.Fatal("the other owner's removal never ran")
	}
}
