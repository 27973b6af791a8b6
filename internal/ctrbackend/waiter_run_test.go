package ctrbackend

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestWaiterWatchdog runs the waiter as PID 1 of a PID namespace of its
// own (as in a container, whose other processes its kill -1 reaches, and
// only those), both the way bash 5.1 and later learn which job ended (wait
// -p) and the way older bash do (the running jobs listed in a command
// substitution), which the test images' bash would never take. A command
// that ends reports its status; one that kills every other process, the
// watchdog among them, is ended by the waiter, not left to run unwatched.
func TestWaiterWatchdog(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	ns := []string{"--pid", "--fork", "--kill-child"}
	if os.Geteuid() != 0 {
		ns = append([]string{"--user", "--map-root-user"}, ns...)
	}
	const waitP = "\n  sb_np=1\n"
	if !strings.Contains(waiter, waitP) {
		t.Fatalf("the waiter no longer chooses wait -p by setting sb_np=1: update this test")
	}
	for _, way := range []struct{ name, script string }{
		{"wait -p", waiter},
		{"jobs", strings.Replace(waiter, waitP, "\n  sb_np=\n", 1)},
	} {
		for _, tc := range []struct {
			name, command string
			code          int
			stop, absent  string
		}{
			{"ends", "echo hi; exit 3", 3, "", ""},
			{"watchdog killed", "echo before; kill -KILL -1; sleep 30; echo after", 128 + 15, StopUnwatched, "after"},
		} {
			t.Run(way.name+"/"+tc.name, func(t *testing.T) {
				cmd := exec.Command(unshare, append(ns, bash, "-p", "-c", way.script, "sandbash", bash)...)
				cmd.Env = SupervisorEnv()
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				stderr, err := cmd.StderrPipe()
				if err != nil {
					t.Fatal(err)
				}
				nonce := NewNonce()
				var out bytes.Buffer
				done := &trailerWriter{s: NewScanner(&out, nonce), seen: make(chan struct{})}
				cmd.Stdout = done
				if err := cmd.Start(); err != nil {
					t.Skipf("cannot start a PID namespace here: %v", err)
				}
				defer func() {
					stdin.Close()
					_ = cmd.Process.Kill()
					_ = cmd.Wait()
				}()
				if _, err := WaitReady(stderr); err != nil {
					t.Fatal(err)
				}
				go func() { _, _ = io.Copy(io.Discard, stderr) }()
				if _, err := stdin.Write(Handover(nonce, tc.command, []string{"PATH=" + SupervisorPath}, time.Minute, 2*time.Second)); err != nil {
					t.Fatal(err)
				}
				stop := make(chan struct{})
				defer close(stop)
				go Heartbeat(stdin, stop)
				select {
				case <-done.seen:
				case <-time.After(25 * time.Second):
					t.Fatalf("no trailer after 25 s; output %q", out.String())
				}
				tr, err := done.s.Done()
				if err != nil {
					t.Fatal(err)
				}
				if tr.ExitCode != tc.code || tr.Stop != tc.stop {
					t.Errorf("trailer: exit %d, stop %q; want %d, %q (output %q)", tr.ExitCode, tr.Stop, tc.code, tc.stop, out.String())
				}
				if tc.absent != "" && strings.Contains(out.String(), tc.absent) {
					t.Errorf("the command ran on: %q", out.String())
				}
			})
		}
	}
}

// trailerWriter feeds a Scanner and closes seen once it found the trailer.
type trailerWriter struct {
	mu   sync.Mutex
	s    *Scanner
	seen chan struct{}
	once sync.Once
}

func (w *trailerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.s.Write(p)
	if t, terr := w.s.Done(); t != nil || terr != nil {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}
