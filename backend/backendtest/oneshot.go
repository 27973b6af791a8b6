package backendtest

import (
	"testing"
	"time"

	"github.com/sandbash/sandbash"
)

// OneShot checks a container backend whose sessions keep nothing warm
// (pool size 0, as `sandbash run` opens them), which leaves the removal of
// a call's container to the engine once the call reported its end: the
// container must still go away by itself, and one whose call did not
// report (its supervisor killed, or the session closed mid-call) must be
// gone when Close returns. newOneShot returns such a backend; leftovers
// lists a session's containers and volumes.
func OneShot(t *testing.T, newOneShot Factory, image string, leftovers func(t *testing.T, sessionID string) []string) {
	f := newFixture(t, newOneShot, Capabilities{Image: image})
	// A call that ends by itself: the engine removes its container, soon.
	s := f.open(sandbash.Config{})
	f.expect(s, "echo one-shot", 0, "one-shot\n")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	left := leftovers(t, s.ID())
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		left = leftovers(t, s.ID())
	}
	if len(left) > 0 {
		t.Errorf("the container of a finished one-shot call was not removed: %v", left)
	}

	// A call whose supervisor is killed: no report; Close removes it.
	s = f.open(sandbash.Config{})
	if r, err := s.Run(f.ctx, sandbash.Request{Command: "kill -KILL -1; sleep 5"}); err == nil && r.ExitCode == 0 {
		t.Errorf("a call that killed its supervisor reported success: %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s.ID()); len(left) > 0 {
		t.Errorf("after Close, the container of a call that killed its supervisor remains: %v", left)
	}

	// A session closed mid-call: Close kills and removes the container.
	s = f.open(sandbash.Config{})
	live := &liveWriter{want: "ready", seen: make(chan struct{})}
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_, _ = s.Run(f.ctx, sandbash.Request{Command: "echo ready; sleep 300", Live: live})
	}()
	select {
	case <-live.seen:
	case <-ran:
		t.Fatal("the call ended before it printed ready")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	<-ran
	if left := leftovers(t, s.ID()); len(left) > 0 {
		t.Errorf("after Close mid-call, the session's container remains: %v", left)
	}
}
