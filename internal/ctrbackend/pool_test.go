package ctrbackend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type unit struct{ id int64 }

// TestPoolSingleUseAndBounded hands out units concurrently and checks that
// none is handed out twice, that live units never exceed the size plus what
// callers hold, and that Close discards everything prepared.
func TestPoolSingleUseAndBounded(t *testing.T) {
	var next, live, maxIdle atomic.Int64
	var held atomic.Int64
	var discarded sync.Map
	prepare := func(ctx context.Context) (*unit, error) {
		n := live.Add(1)
		if idle := n - held.Load(); idle > maxIdle.Load() {
			maxIdle.Store(idle)
		}
		time.Sleep(time.Millisecond)
		return &unit{id: next.Add(1)}, nil
	}
	discard := func(u *unit) {
		if _, dup := discarded.LoadOrStore(u.id, true); dup {
			t.Errorf("unit %d discarded twice", u.id)
		}
		live.Add(-1)
	}
	p := NewPool(3, prepare, discard)
	var seen sync.Map
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				u, err := p.Get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				held.Add(1)
				if _, dup := seen.LoadOrStore(u.id, true); dup {
					t.Errorf("unit %d handed out twice", u.id)
				}
				discard(u)
				held.Add(-1)
			}
		}()
	}
	wg.Wait()
	p.Close()
	if n := live.Load(); n != 0 {
		t.Errorf("%d units left after Close", n)
	}
	if m := maxIdle.Load(); m > 3+8 {
		t.Errorf("up to %d units existed beyond those held", m)
	}
	if _, err := p.Get(context.Background()); !errors.Is(err, ErrPoolClosed) {
		t.Errorf("Get after Close: %v", err)
	}
}

func TestPoolReportsPrepareErrorAndRecovers(t *testing.T) {
	var fail atomic.Bool
	fail.Store(true)
	boom := errors.New("image missing")
	p := NewPool(1, func(ctx context.Context) (int, error) {
		if fail.Load() {
			return 0, boom
		}
		return 7, nil
	}, func(int) {})
	defer p.Close()
	if _, err := p.Get(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Get = %v, want the prepare error", err)
	}
	fail.Store(false)
	if u, err := p.Get(context.Background()); err != nil || u != 7 {
		t.Fatalf("Get after recovery = %v, %v", u, err)
	}
}

func TestScanner(t *testing.T) {
	nonce := "abc123"
	stream := "hello\x1eabc12 not it\nworld" + "\x1e" + nonce + " 3 1 -\n"
	for chunk := 1; chunk <= len(stream); chunk++ {
		var out bytesBuf
		s := NewScanner(&out, nonce)
		for i := 0; i < len(stream); i += chunk {
			s.Write([]byte(stream[i:min(i+chunk, len(stream))]))
		}
		tr, err := s.Done()
		if err != nil || tr == nil || tr.ExitCode != 3 || tr.OOMKills != 1 {
			t.Fatalf("chunk %d: trailer %+v, %v", chunk, tr, err)
		}
		if out.String() != "hello\x1eabc12 not it\nworld" {
			t.Fatalf("chunk %d: output %q", chunk, out.String())
		}
	}
	// Output is passed on at once unless it may begin the trailer.
	var live bytesBuf
	s := NewScanner(&live, nonce)
	s.Write([]byte("ready\n"))
	if live.String() != "ready\n" {
		t.Errorf("ordinary output held back: %q", live.String())
	}
	s.Write([]byte("x\x1eabc"))
	if live.String() != "ready\nx" {
		t.Errorf("a possible trailer start was passed on: %q", live.String())
	}
	// Without the nonce, a look-alike trailer is plain output.
	var out bytesBuf
	s = NewScanner(&out, nonce)
	s.Write([]byte("\x1eforged 0 0\n"))
	s.Flush()
	if tr, _ := s.Done(); tr != nil || out.String() != "\x1eforged 0 0\n" {
		t.Errorf("forged trailer accepted: %+v, %q", tr, out.String())
	}
}

type bytesBuf struct{ b []byte }

func (w *bytesBuf) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
func (w *bytesBuf) String() string              { return string(w.b) }

func TestPoolOnDemand(t *testing.T) {
	var prepared atomic.Int64
	p := NewPool(0, func(ctx context.Context) (int, error) { return int(prepared.Add(1)), nil }, func(int) {})
	defer p.Close()
	time.Sleep(20 * time.Millisecond)
	if n := prepared.Load(); n != 0 {
		t.Fatalf("a size-0 pool prepared %d units ahead", n)
	}
	if u, err := p.Get(context.Background()); err != nil || u != 1 {
		t.Fatalf("Get = %v, %v", u, err)
	}
	time.Sleep(20 * time.Millisecond)
	if n := prepared.Load(); n != 1 {
		t.Fatalf("a size-0 pool refilled: %d prepared", n)
	}
}

// TestPoolGrowsForBackToBackCallsAndFallsBack: Gets that find nothing ready
// make the pool prepare several units at once, never more than its
// maximum; after a quiet spell it holds only its size again.
func TestPoolGrowsForBackToBackCallsAndFallsBack(t *testing.T) {
	var live, busy, maxBusy, maxLive atomic.Int64
	prepare := func(ctx context.Context) (int, error) {
		n := busy.Add(1)
		for m := maxBusy.Load(); n > m && !maxBusy.CompareAndSwap(m, n); m = maxBusy.Load() {
		}
		l := live.Add(1)
		for m := maxLive.Load(); l > m && !maxLive.CompareAndSwap(m, l); m = maxLive.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		busy.Add(-1)
		return 1, nil
	}
	discard := func(int) { live.Add(-1) }
	p := NewPool(1, prepare, discard)
	budget := NewBudget(2)
	p.Grow(3, 200*time.Millisecond, budget)
	defer p.Close()
	for range 20 {
		u, err := p.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		discard(u) // a call of no time: back to back
	}
	if m := maxBusy.Load(); m < 2 {
		t.Errorf("back-to-back Gets: at most %d preparation at once, want the pool to grow", m)
	}
	if m := maxLive.Load(); m > 3+1 {
		t.Errorf("up to %d units existed, beyond the maximum 3 plus the one held", m)
	}
	// Past the quiet spell (live can be 1 for a moment while the grown
	// pool refills, too).
	time.Sleep(600 * time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for live.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := live.Load(); n != 1 {
		t.Errorf("after a quiet spell the pool holds %d units, want its size, 1", n)
	}
	// One call after the quiet spell: the pool refills to its size only.
	if _, err := p.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := live.Load(); n != 2 {
		t.Errorf("after one Get following the quiet spell, %d units exist, want 2 (the one held and one ready)", n)
	}
}

// TestPoolOfSizeZeroDoesNotGrow: a one-shot session's pool prepares on
// demand only, however its calls come.
func TestPoolOfSizeZeroDoesNotGrow(t *testing.T) {
	var live atomic.Int64
	p := NewPool(0, func(ctx context.Context) (int, error) { live.Add(1); return 1, nil }, func(int) { live.Add(-1) })
	p.Grow(4, time.Minute, NewBudget(4))
	defer p.Close()
	for range 5 {
		if _, err := p.Get(context.Background()); err != nil {
			t.Fatal(err)
		}
		live.Add(-1)
	}
	time.Sleep(50 * time.Millisecond)
	if n := live.Load(); n != 0 {
		t.Errorf("a pool of size 0 prepared %d units ahead", n)
	}
}

// TestPoolsShareGrowthBudget: pools that share a budget grow by its size
// at most, together, and give it back when they close.
func TestPoolsShareGrowthBudget(t *testing.T) {
	var live, maxLive atomic.Int64
	prepare := func(ctx context.Context) (int, error) {
		l := live.Add(1)
		for m := maxLive.Load(); l > m && !maxLive.CompareAndSwap(m, l); m = maxLive.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		return 1, nil
	}
	discard := func(int) { live.Add(-1) }
	budget := NewBudget(1)
	var wg sync.WaitGroup
	pools := make([]*Pool[int], 3)
	for i := range pools {
		pools[i] = NewPool(1, prepare, discard)
		pools[i].Grow(4, time.Minute, budget)
		wg.Add(1)
		go func(p *Pool[int]) {
			defer wg.Done()
			for range 15 {
				u, err := p.Get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				discard(u)
			}
		}(pools[i])
	}
	wg.Wait()
	// Each pool's size, the one unit of budget, and what the Gets held.
	if m := maxLive.Load(); m > 3+1+3 {
		t.Errorf("up to %d units existed: the pools grew beyond their shared budget of 1", m)
	}
	for _, p := range pools {
		p.Close()
	}
	if !budget.take() || budget.take() {
		t.Error("closed pools did not give back exactly the budget they took")
	}
}
