package backendtest

import (
	"strings"
	"time"

	"github.com/sandbash/sandbash/backend"
)

// testSandboxDeadline: a supervised sandbox ends a call at the call's
// deadline by itself (SIGTERM, then SIGKILL after the grace period), when
// sandbash does not: sandbash stopped or wedged while its connection stays
// up. The suite drives the backend directly here, so that nothing of the
// root package's own timeout is in play.
func testSandboxDeadline(f *fixture) {
	spec := f.spec("deadline")
	s, err := f.b.Open(f.ctx, spec)
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	for _, tc := range []struct{ name, cmd string }{
		{"stops on SIGTERM", "echo started; sleep 300"},
		{"ignores SIGTERM", "trap '' TERM; echo started; while :; do sleep 1; done"},
	} {
		var out strings.Builder
		p, err := s.Start(f.ctx, &backend.Call{Command: tc.cmd, Output: &out, Deadline: 2 * time.Second, KillGrace: time.Second})
		if err != nil {
			f.t.Fatalf("%s: Start: %v", tc.name, err)
		}
		done := make(chan struct{})
		var exit backend.Exit
		go func() {
			defer close(done)
			exit, err = p.Wait()
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			_ = p.Signal(9)
			<-done
			f.t.Fatalf("%s: the call outlived its 2 s deadline by a minute: the sandbox does not end it by itself", tc.name)
		}
		if err != nil || !exit.TimedOut || exit.Code != 143 && exit.Code != 137 {
			f.t.Errorf("%s: Wait = %+v, %v; want a timed-out exit (143 or 137)", tc.name, exit, err)
		}
		if !strings.Contains(out.String(), "started") {
			f.t.Errorf("%s: output %q", tc.name, out.String())
		}
	}
}
