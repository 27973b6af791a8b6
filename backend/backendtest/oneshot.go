package backendtest

import (
	"strings"
	"testing"
	"time"

	"github.com/sandbash/sandbash"
)

// OneShot checks a container backend whose sessions keep nothing warm
// (pool size 0, as `sandbash run` opens them), which leaves the removal of
// a call's container to the engine once the call reported its end: the
// container must still go away by itself, and one whose call did not
// report (the session closed mid-call) must be gone when Close returns. newOneShot returns such a backend; leftovers
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

	// A call that tries to make the container's PID 1 its own (writing
	// code into /proc/1/mem that makes it exec `sleep 120`), to keep the
	// container alive after its call: one-shot sessions do not kill the
	// container once its call reported, they trust PID 1, the supervisor,
	// to end it. It must not take, and the container must go.
	s = f.open(sandbash.Config{})
	r := f.run(s, HijackInit)
	if strings.Contains(r.Output, "init is sleep") {
		t.Errorf("a command took over its container's PID 1: %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	left = leftovers(t, s.ID())
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		left = leftovers(t, s.ID())
	}
	if len(left) > 0 {
		t.Errorf("the container of a call that tried to take over its PID 1 remains: %v", left)
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

// HijackInit, a command, tries to make the container's PID 1 exec
// /bin/sleep 120, printing "init is sleep" when it did: x86-64 code
// (execve("/bin/sleep", {"/bin/sleep", "120", NULL}, NULL), else exit(7))
// written over the init's code where its blocked system call returns (the
// pc in /proc/1/syscall), then a SIGCHLD to wake it.
const HijackInit = `read -r -a f < /proc/1/syscall || exit 3
pc=${f[8]}
[ "$(uname -m)" = x86_64 ] || exit 4
printf '\x31\xd2\x52\x48\x8d\x05\x2a\x00\x00\x00\x50\x48\x8d\x3d\x17\x00\x00\x00\x57\x48\x89\xe6\xb8\x3b\x00\x00\x00\x0f\x05\xb8\x3c\x00\x00\x00\xbf\x07\x00\x00\x00\x0f\x05/bin/sleep\x00120\x00' > /tmp/sc
dd if=/tmp/sc of=/proc/1/mem bs=1 seek=$((pc)) conv=notrunc 2>/dev/null || exit 5
kill -CHLD 1
for i in 1 2 3 4 5 6 7 8 9 10; do
  [ "$(cat /proc/1/comm)" = sleep ] && { echo init is sleep; exit 0; }
  sleep 0.2
done
cat /proc/1/comm`
