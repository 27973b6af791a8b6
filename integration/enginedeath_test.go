//go:build enginedeath

// These tests stop sandbash, dockerd and the Podman service mid-call, so
// they run on their own, after everything else (make test runs them with
// -tags enginedeath -p 1): nothing else may use the engines meanwhile.

package integration

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// callProcesses lists the host processes whose command line holds mark,
// other than the sandbash CLI itself (whose arguments hold the command).
func callProcesses(mark string, cli int) []string {
	var found []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == cli || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), mark) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

// untilGone waits up to limit for the call's processes to end.
func untilGone(t *testing.T, mark string, cli int, limit time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		left := callProcesses(mark, cli)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the call's processes are still running %v later: %v", what, limit, left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startCall starts `sandbash run` of a long call on e and waits until it
// runs; it returns the CLI's command (stderr in errOut) and the marker,
// which the call puts in the argv of the process that says it is ready
// (sandbash keeps the command itself out of every argv).
func startCall(t *testing.T, e engine, c *cli, args ...string) (*exec.Cmd, *strings.Builder, string) {
	t.Helper()
	mark := fmt.Sprintf("sbdeath%d", time.Now().UnixNano())
	cmd := c.cmd(append(append(append([]string{"run"}, e.args()...), args...), "--", "bash -c 'echo ready; sleep 300; :' "+mark)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut := &strings.Builder{}
	cmd.Stderr = errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v (stderr %s)", line, err, errOut)
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if len(callProcesses(mark, cmd.Process.Pid)) == 0 {
		t.Fatal("the call's marked process is not in the host's process table: the test would prove nothing")
	}
	return cmd, errOut, mark
}

// gcLeavesNothing runs gc and checks that nothing of process pid is left.
func gcLeavesNothing(t *testing.T, e engine, c *cli, pid int) {
	t.Helper()
	out, errOut, code := c.run("gc")
	if code != 0 {
		t.Fatalf("gc: exit %d: %s%s", code, out, errOut)
	}
	if left := append(objects(t, e.name, pid), stagedMounts(pid)...); len(left) > 0 {
		t.Errorf("after gc: %v", left)
	}
}

// TestDeadSandbashEndsItsCall: kill -9 of sandbash mid-call ends the call's
// processes within seconds, before any gc; gc then removes the rest.
func TestDeadSandbashEndsItsCall(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		cmd, _, mark := startCall(t, e, c)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		untilGone(t, mark, cmd.Process.Pid, 20*time.Second, "after kill -9 of sandbash")
		gcLeavesNothing(t, e, c, cmd.Process.Pid)
	})
}

// TestStoppedSandbashEndsItsCall: a sandbash stopped mid-call (SIGSTOP)
// cannot keep its call running; when it resumes it says what happened.
func TestStoppedSandbashEndsItsCall(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		cmd, errOut, mark := startCall(t, e, c, "--timeout", "600")
		_ = cmd.Process.Signal(syscall.SIGSTOP)
		untilGone(t, mark, cmd.Process.Pid, 30*time.Second, "with sandbash stopped")
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(errOut.String(), "lost its connection to sandbash") || !strings.Contains(errOut.String(), "did not exit by itself") {
			t.Errorf("after SIGCONT: exit %d, stderr %q; want 125 and that the supervisor lost sandbash", code, errOut)
		}
	})
}

// TestWarmContainerOfDeadSandbash: the warm container an MCP server keeps
// for its next call exits by itself when the server is killed.
func TestWarmContainerOfDeadSandbash(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		cmd := c.cmd(append(append([]string{"mcp"}, e.args()...), "--workspace", c.dir)...)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}`)
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the MCP server: %v", err)
			}
			if strings.Contains(line, `"id":2`) {
				break
			}
		}
		running := func() []string {
			var ids []string
			for _, o := range objects(t, e.name, cmd.Process.Pid) {
				id := strings.TrimPrefix(o, "ps ")
				st, _ := exec.Command(e.name, "inspect", "--format", "{{.State.Running}}", id).Output()
				if strings.TrimSpace(string(st)) == "true" {
					ids = append(ids, id)
				}
			}
			return ids
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(running()) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no warm container appeared: the test proves nothing")
			}
			time.Sleep(200 * time.Millisecond)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		deadline = time.Now().Add(20 * time.Second)
		for ids := running(); len(ids) > 0; ids = running() {
			if time.Now().After(deadline) {
				t.Fatalf("the warm containers of a killed sandbash still run 20 s later: %v", ids)
			}
			time.Sleep(200 * time.Millisecond)
		}
		gcLeavesNothing(t, e, c, cmd.Process.Pid)
	})
}

// TestEngineGoesAwayMidCall stops dockerd, and kills the Podman service,
// during a call: the call's processes end, sandbash says the engine went
// away and exits 125; the engine is started again afterwards.
func TestEngineGoesAwayMidCall(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		cmd, errOut, mark := startCall(t, e, c)
		var want []string
		switch e.name {
		case "docker":
			stopProcess(t, "dockerd", syscall.SIGTERM)
			want = []string{"Docker daemon"}
		case "podman":
			stopProcess(t, "podman system service", syscall.SIGKILL)
			want = []string{"Podman service"}
		}
		defer restartEngine(t, e.name)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("sandbash did not end within a minute of the engine going away; stderr %q", errOut)
		}
		msg := errOut.String()
		if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(msg, "did not exit by itself") {
			t.Errorf("exit %d, stderr %q; want 125 and that the command did not exit by itself", code, msg)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("stderr %q does not name the %s", msg, w)
			}
		}
		untilGone(t, mark, cmd.Process.Pid, 30*time.Second, "after the engine went away")
		restartEngine(t, e.name)
		gcLeavesNothing(t, e, c, cmd.Process.Pid)
	})
}

// processesStarting lists our own user's processes whose command line
// starts with name, read from /proc (pgrep's absence must not read as
// "none"). Only our own: another user's rootless Podman service (make
// test-user's) is not the engine these tests stop and start again.
func processesStarting(name string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fi, err := os.Stat("/proc/" + e.Name()); err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
			continue
		}
		// Arguments are NUL-separated in /proc; name has spaces.
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), name) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// stopProcess signals the processes whose command line starts with name
// and waits until they are gone.
func stopProcess(t *testing.T, name string, sig syscall.Signal) {
	t.Helper()
	pids := processesStarting(name)
	if len(pids) == 0 {
		t.Fatalf("no %s process to stop", name)
	}
	for _, p := range pids {
		pid, _ := strconv.Atoi(p)
		_ = syscall.Kill(pid, sig)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if len(processesStarting(name)) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not stop within a minute", name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// restartEngine starts the engine again the way make test does; a second
// call finds it running and does nothing.
func restartEngine(t *testing.T, engine string) {
	t.Helper()
	if out, err := exec.Command("../scripts/deps.sh", engine).CombinedOutput(); err != nil {
		t.Fatalf("starting %s again: %v\n%s", engine, err, out)
	}
}
