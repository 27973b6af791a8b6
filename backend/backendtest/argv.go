package backendtest

import (
	"context"
	"time"

	"github.com/sandbash/sandbash"
)

// testCommandNotInHostArgv: while a call runs, no process on the host
// (the sandbox's included: they are host processes, and every user can
// read their command lines with ps) has the command in its argv.
func testCommandNotInHostArgv(f *fixture) {
	s := f.open(sandbash.Config{})
	secret := marker()
	live := &liveWriter{want: "started\n", seen: make(chan struct{})}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Run(ctx, sandbash.Request{Command: "secret=" + secret + "; echo started; sleep 60; :", Live: live})
		done <- err
	}()
	select {
	case <-live.seen:
	case err := <-done:
		f.t.Fatalf("the call ended before it started: %v (%q)", err, live.buf.String())
	case <-time.After(time.Minute):
		f.t.Fatal("the call did not start within a minute")
	}
	if found := processesWith(secret); len(found) > 0 {
		f.t.Errorf("the command is in the argv of host processes, for every user's ps to see: %v", found)
	}
	cancel()
	<-done
}
