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

// TestWaiterAsPID1 runs the waiter as PID 1 of a PID namespace of its own,
// as in a container, whose other processes its kill -1 reaches, and only
// those: a command that ends reports its status, and one that leaves
// processes behind (ignoring SIGTERM and SIGHUP) has them killed before
// the report; the deadline and the loss of sandbash (stdin ending) end the
// call and say so; and the signals a command can send its PID 1 that the
// waiter does not trap never arrive.
func TestWaiterAsPID1(t *testing.T) {
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
	{
		for _, tc := range []struct {
			name, command string
			// deadline, grace: the handover's; lost: stdin closes right
			// after the handover (sandbash gone), else a heartbeat.
			deadline, grace time.Duration
			lost            bool
			code            int
			stop, absent    string
		}{
			{"ends", "echo hi; exit 3", time.Minute, 2 * time.Second, false, 3, "", ""},
			{"leftovers", `(trap "" TERM HUP; exec sleep 300) & echo left`, time.Minute, time.Second, false, 0, "", ""},
			{"deadline", "sleep 30; echo after", time.Second, time.Second, false, 128 + 15, StopDeadline, "after"},
			{"lost", "sleep 1; sleep 30; echo after", time.Minute, time.Second, true, 128 + 15, StopLost, "after"},
			{"signals dropped", "kill -INT 1; kill -QUIT 1; kill -PIPE 1; kill -ALRM 1; kill -STOP 1; exit 0", time.Minute, time.Second, false, 0, "", ""},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cmd := exec.Command(unshare, append(ns, bash, "-p", "-c", waiter, "sandbash", bash)...)
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
				if _, err := stdin.Write(Handover(nonce, tc.command, []string{"PATH=" + SupervisorPath}, tc.deadline, tc.grace)); err != nil {
					t.Fatal(err)
				}
				if tc.lost {
					stdin.Close()
				} else {
					stop := make(chan struct{})
					defer close(stop)
					go Heartbeat(stdin, stop)
				}
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
