package ctrbackend

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
//
// The attacks of a command on its supervisor: it stops every other process
// (the helpers that relay the heartbeat and wait for it), sends PID 1 the
// SIGTERM it traps while ignoring SIGTERM itself, sends the signals an
// earlier waiter used for its own events, kills the helpers, makes PID 1
// unable to fork, or writes a forged end to every file it holds. Then
// sandbash goes away (stdin closes): the call must still end, and say why.
func TestWaiterAsPID1(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	// The waiter runs from an execute-only copy of bash, as in a
	// container (see boot), which makes it and its helpers non-dumpable.
	dir, err := os.MkdirTemp("", "waiter-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(bash)
	if err != nil {
		t.Fatal(err)
	}
	waiterBash := filepath.Join(dir, "waiter")
	if err := os.WriteFile(waiterBash, b, 0o111); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(waiterBash, 0o111); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, command string
		// deadline, grace: the handover's; lost: stdin closes right
		// after the handover (sandbash gone), else a heartbeat until
		// the output holds closeAfter (then stdin closes), if set.
		deadline, grace time.Duration
		lost            bool
		closeAfter      string
		// nobody: without capabilities, as in a container (uid 65534
		// when the test runs as root, for whom RLIMIT_NPROC does not
		// hold either).
		nobody       bool
		need         string
		code         int
		stop, absent string
	}{
		{name: "ends", command: "echo hi; exit 3", deadline: time.Minute, grace: 2 * time.Second, code: 3},
		{name: "leftovers", command: `(trap "" TERM HUP; exec sleep 300) & echo left`, deadline: time.Minute, grace: time.Second},
		{name: "deadline", command: "sleep 30; echo after", deadline: time.Second, grace: time.Second, code: 128 + 15, stop: StopDeadline, absent: "after"},
		{name: "lost", command: "sleep 1; sleep 30; echo after", deadline: time.Minute, grace: time.Second, lost: true, code: 128 + 15, stop: StopLost, absent: "after"},
		{name: "signals dropped", command: "kill -INT 1; kill -QUIT 1; kill -PIPE 1; kill -ALRM 1; kill -STOP 1; exit 0", deadline: time.Minute, grace: time.Second},
		// F3: the signals an earlier waiter trapped for its watchdog's
		// events (HUP lost, USR1 deadline, USR2 kill) fake nothing.
		{name: "no forged reasons", command: "kill -HUP 1; kill -USR1 1; kill -USR2 1; sleep 1; exit 0", deadline: time.Minute, grace: time.Second},
		// F1: every other process stopped, then sandbash goes.
		{name: "helpers stopped", command: `trap "" TERM; kill -STOP -1; echo stopped; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, closeAfter: "stopped", code: 128 + 9, stop: StopLost, absent: "after"},
		// F2: a SIGTERM to PID 1 that the command ignores, then
		// sandbash goes: the first reason is reported, the second
		// still ends the call.
		{name: "term ignored", command: `trap "" TERM; kill -TERM 1; sleep 2; echo termed; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, closeAfter: "termed", code: 128 + 9, stop: StopTerm, absent: "after"},
		{name: "helpers killed", command: `kill -KILL -1; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, code: 128 + 9, stop: StopUnwatched, absent: "after"},
		// Its parent, the helper that waits for it, killed: its status
		// is lost, which the call reports at once, not at its deadline.
		{name: "parent killed", command: `kill -KILL $PPID; echo killed; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, code: 128 + 9, stop: StopUnwatched, absent: "after"},
		// The heartbeat relay killed (every process but PID 1, the
		// command's parent and its own): not a lost sandbash.
		{name: "relay killed", command: `for p in /proc/[0-9]*; do p=${p#/proc/}; [ $p = 1 ] || [ $p = $PPID ] || [ $p = $$ ] || kill -KILL $p; done 2>/dev/null; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, code: 128 + 9, stop: StopUnwatched, absent: "after"},
		// PID 1 cannot fork (a same-uid process may lower its
		// RLIMIT_NPROC, as a command that fills the container's pids
		// limit does for every process): the stop still ends a
		// command that ignores SIGTERM.
		{name: "no forks", command: `trap "" TERM; prlimit --pid 1 --nproc=1:1 && echo limited; sleep 300; echo after`, deadline: time.Minute, grace: time.Second, closeAfter: "limited", nobody: true, need: "prlimit", code: 128 + 9, stop: StopLost, absent: "after"},
		// The command holds no end of the supervisor's event pipe, nor
		// can reopen one through /proc/self/fd, nor through its
		// parent's /proc/<pid>/fd (the helper that waits for it is
		// non-dumpable; as uid 65534, without the host root's
		// CAP_SYS_PTRACE).
		{name: "forged end", command: `for f in /proc/self/fd/* /proc/$PPID/fd/*; do echo "done 0" 2>/dev/null >"$f"; echo lost 2>/dev/null >"$f"; done; sleep 30; echo after`, deadline: 2 * time.Second, grace: time.Second, nobody: true, code: 128 + 15, stop: StopDeadline, absent: "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.need != "" {
				if _, err := exec.LookPath(tc.need); err != nil {
					t.Skipf("no %s", tc.need)
				}
			}
			ns := []string{"--pid", "--fork", "--kill-child", "--mount-proc"}
			if os.Geteuid() != 0 {
				ns = append([]string{"--user", "--map-root-user"}, ns...)
			}
			if tc.nobody {
				setpriv, err := exec.LookPath("setpriv")
				if err != nil {
					t.Skip("no setpriv")
				}
				if os.Geteuid() == 0 {
					ns = append(ns, setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
				} else {
					// Root of the user namespace, without its
					// capabilities there.
					ns = append(ns, setpriv, "--bounding-set=-all", "--inh-caps=-all")
				}
				// setpriv execs with the capabilities it drops
				// only then, which would let it read the copy
				// (and make the waiter dumpable): the waiter is
				// executed by a process that has none.
				ns = append(ns, bash, "-c", `exec "$@"`, "bash")
			}
			cmd := exec.Command(unshare, append(ns, waiterBash, "-p", "-c", waiter, "sandbash", bash)...)
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
			done := &trailerWriter{s: NewScanner(&output{}, nonce), seen: make(chan struct{})}
			out := done.s.Out.(*output)
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
				beat := make(chan struct{})
				go func() { Heartbeat(stdin, stop); close(beat) }()
				defer func() {
					select {
					case <-stop:
					default:
						close(stop)
					}
				}()
				if tc.closeAfter != "" {
					select {
					case <-out.wait(tc.closeAfter):
					case <-time.After(20 * time.Second):
						t.Fatalf("the command did not write %q; output %q", tc.closeAfter, out.String())
					}
					close(stop)
					<-beat
					stdin.Close()
				}
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

// output collects output, and tells when it holds a string.
type output struct {
	mu    sync.Mutex
	b     bytes.Buffer
	wants []want
}

type want struct {
	s  string
	ch chan struct{}
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	keep := o.wants[:0]
	for _, w := range o.wants {
		if strings.Contains(o.b.String(), w.s) {
			close(w.ch)
		} else {
			keep = append(keep, w)
		}
	}
	o.wants = keep
	return len(p), nil
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// wait returns a channel closed once the output holds s.
func (o *output) wait(s string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	ch := make(chan struct{})
	if strings.Contains(o.b.String(), s) {
		close(ch)
	} else {
		o.wants = append(o.wants, want{s, ch})
	}
	return ch
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

// TestEventReaderKeepsLines reads 20000 lines, written in bursts, through
// the waiter's sb_next with a timeout short enough that many reads time
// out as a line arrives, while the reader gets a stream of the signals a
// command can send its PID 1 (with the waiter's traps): every line must
// arrive whole, once, in order.
// (Bash's read of a whole line with -t loses the newline when the timeout
// strikes as it takes it, and the line runs into the next: a "done" lost
// that way made the waiter end a call that had ended by itself as
// unwatched, under load.)
func TestEventReaderKeepsLines(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	const lines = 20000
	script := `trap '' HUP INT QUIT USR1 USR2 ALRM PIPE
trap 'sb_sig=1' TERM
echo ready >&3
exec 3>&-
` + eventReader + `
sb_tick=0.0001
f=$(mktemp -u) && mkfifo "$f" && exec {z}<>"$f" && rm -f "$f" || exit 1
# The writer pauses after every third line (a read of a FIFO that nobody
# writes times out), so that the reader's timeouts meet arriving lines.
exec {sb_ev}< <(for ((i = 1; i <= ` + strconv.Itoa(lines) + `; i++)); do echo "line $i"; ((i % 3)) || read -t 0.0001 -u $z; done)
n=0 timeouts=0
while :; do
  sb_next
  case $? in
  0)
    n=$((n + 1))
    if [ "$sb_l" != "line $n" ]; then
      echo "line $n: got '$sb_l'"
      exit 1
    fi ;;
  1) timeouts=$((timeouts + 1)) ;;
  *) break ;;
  esac
done
echo "$n $timeouts"`
	cmd := exec.Command(bash, "-c", script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The script says when its traps are set, before the signals begin.
	ready, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(ready); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	signals := []syscall.Signal{syscall.SIGTERM, syscall.SIGALRM, syscall.SIGCHLD, syscall.SIGUSR1, syscall.SIGHUP}

	for i := 0; ; i++ {
		select {
		case err = <-done:
		case <-time.After(200 * time.Microsecond):
			_ = cmd.Process.Signal(signals[i%len(signals)])
			continue
		}
		break
	}
	if err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	var n, timeouts int
	if _, err := fmt.Sscan(out.String(), &n, &timeouts); err != nil {
		t.Fatalf("the reader's output %q: %v", out.String(), err)
	}
	if n != lines {
		t.Errorf("read %d lines, want %d", n, lines)
	}
	if timeouts == 0 {
		t.Errorf("no read timed out: the test proved nothing")
	}
}
