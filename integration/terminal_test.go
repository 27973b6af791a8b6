package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// console is sandbash running with stdin, stdout and stderr on a
// pseudo-terminal (its controlling terminal), as a person would run it. The
// pty is opened with x/sys/unix (already a dependency) rather than a pty
// library: it takes three ioctls.
type console struct {
	t      *testing.T
	master *os.File
	cmd    *exec.Cmd
	chunks chan []byte
	out    []byte // everything read so far
	mark   int    // start of what came after the last answer
	rows   int
	cols   int
}

func startConsole(t *testing.T, c *cli, rows, cols int, args ...string) *console {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	fd := int(master.Fd()) // blocking from now on: one goroutine reads it
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)}); err != nil {
		t.Fatal(err)
	}
	cmd := c.cmd(args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	k := &console{t: t, master: master, cmd: cmd, chunks: make(chan []byte, 64), rows: rows, cols: cols}
	go func() {
		defer close(k.chunks)
		for {
			buf := make([]byte, 4096)
			n, err := master.Read(buf)
			if n > 0 {
				k.chunks <- buf[:n]
			}
			if err != nil { // EIO once every holder of the slave is gone
				return
			}
		}
	}()
	t.Cleanup(func() {
		if k.cmd.ProcessState == nil {
			k.cmd.Process.Kill()
			k.cmd.Wait()
		}
		master.Close()
	})
	return k
}

// waitFor reads until done(what came since the last answer) holds, or the
// terminal closes; it reports which. The deadline only keeps a broken
// sandbash from hanging the test.
func (k *console) waitFor(done func(string) bool) bool {
	k.t.Helper()
	deadline := time.After(2 * time.Minute)
	for !done(k.since()) {
		select {
		case b, ok := <-k.chunks:
			if !ok {
				return false
			}
			k.out = append(k.out, b...)
		case <-deadline:
			k.t.Fatalf("sandbash printed nothing more for 2 minutes; so far:\n%s", k.out)
		}
	}
	return true
}

func (k *console) since() string { return strings.ReplaceAll(string(k.out[k.mark:]), "\r\n", "\n") }

func (k *console) answer(s string) {
	k.mark = len(k.out)
	if _, err := k.master.Write([]byte(s)); err != nil {
		k.t.Fatal(err)
	}
}

// finish reads to the end and returns the exit status and all the output,
// with the terminal's \r\n turned back into \n.
func (k *console) finish() (int, string) {
	k.t.Helper()
	k.waitFor(func(string) bool { return false })
	k.cmd.Wait()
	return k.cmd.ProcessState.ExitCode(), strings.ReplaceAll(string(k.out), "\r\n", "\n")
}

var sgrRE = regexp.MustCompile(`^\x1b\[[0-9;:]*m`)

// onlySGR fails unless every ESC in out starts a colour sequence and out
// holds no C1 control.
func onlySGR(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == 0x1b && !sgrRE.MatchString(out[i:]) {
			t.Errorf("%s: a raw escape sequence reached the terminal at %d: %q", what, i, out[i:min(len(out), i+20)])
		}
		if r >= 0x80 && r <= 0x9f {
			t.Errorf("%s: a C1 control reached the terminal at %d", what, i)
		}
	}
}

// attack writes to the clipboard (OSC 52), moves the cursor up to rewrite
// the line before, prints in colour and a progress bar, switches to the
// alternate screen with an 8-bit CSI, and ends in colour, inside an
// unfinished sequence.
const attack = `printf '\033]52;c;%s\a' $(printf pwned | base64); printf 'safe\n\033[1A\033[2Krewritten\n'; printf '\033[31mred\033[0m\n'; printf '50%%\r100%%\n'; printf '\302\233?1049h\n'; printf '\033[32mgreen\033[1;3'`

// TestTerminalOutputIsDefused: output printed to a terminal cannot act on
// it; to a pipe it stays byte for byte.
func TestTerminalOutputIsDefused(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		run := append(append([]string{"run"}, e.args()...), "--")

		code, out := startConsole(t, c, 24, 80, append(run, attack)...).finish()
		onlySGR(t, "live", out)
		for _, want := range []string{`\x1b]52;c;cHduZWQ=\x07`, `\x1b[1A\x1b[2Krewritten`, "\x1b[31mred\x1b[0m", "50%\r100%", `\u009b?1049h`, "\x1b[32mgreen" + `\x1b[1;3` + "\x1b[m"} {
			if !strings.Contains(out, want) {
				t.Errorf("live output on a terminal lacks %q:\n%q", want, out)
			}
		}
		if code != 0 {
			t.Errorf("exit %d", code)
		}

		code, out = startConsole(t, c, 24, 80, append(append([]string{"run", "--observation"}, e.args()...), "--", attack)...).finish()
		onlySGR(t, "observation", out)
		for _, want := range []string{`\x1b]52;c;cHduZWQ=\x07`, `\x1b[1A\x1b[2Krewritten`, `50%\r100%`} {
			if !strings.Contains(out, want) {
				t.Errorf("--observation on a terminal lacks %q:\n%q", want, out)
			}
		}
		if code != 0 {
			t.Errorf("--observation: exit %d", code)
		}

		// JSON escapes controls itself; C1 too, so a terminal shows them.
		code, out = startConsole(t, c, 24, 80, append(append([]string{"run", "--json"}, e.args()...), "--", attack)...).finish()
		onlySGR(t, "json", out)
		var obj struct{ Output string }
		// sandbash's own notices on stderr (as a user: the limits that
		// hold) share the terminal; the JSON follows them.
		js := out
		for strings.HasPrefix(js, "sandbash: ") {
			_, js, _ = strings.Cut(js, "\n")
		}
		if err := json.Unmarshal([]byte(js), &obj); err != nil || code != 0 || !strings.Contains(obj.Output, "\x1b]52;c;cHduZWQ=\x07") || !strings.Contains(obj.Output, "\u009b?1049h") {
			t.Errorf("--json on a terminal: exit %d, %v, %q", code, err, out)
		}

		// To a pipe, the bytes the command wrote.
		stdout, _, code := c.run(append(run, attack)...)
		want := "\x1b]52;c;cHduZWQ=\x07safe\n\x1b[1A\x1b[2Krewritten\n\x1b[31mred\x1b[0m\n50%\r100%\n\u009b?1049h\n\x1b[32mgreen\x1b[1;3"
		if code != 0 || stdout != want {
			t.Errorf("live output to a pipe changed: exit %d\n%q\nwant\n%q", code, stdout, want)
		}
	})
}

// TestTerminalMessagesAreDefused: sandbash's own messages on a terminal can
// quote what the sandbox controls: here the image named in the workspace's
// devcontainer.json, which a command can write. They cannot act on it
// (devcontainer quotes a name that is no image reference with %q; the
// terminal filter stands behind that).
func TestTerminalMessagesAreDefused(t *testing.T) {
	forAgentBackends(t, false, func(t *testing.T, e engine, c *cli) {
		dir := filepath.Join(c.dir, ".devcontainer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "devcontainer.json"), []byte(`{"image": "\u001b]52;c;cHduZWQ=\u0007img"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out := startConsole(t, c, 24, 80, append(append([]string{"run"}, e.backendArgs()...), "--", "true")...).finish()
		onlySGR(t, "stderr", out)
		if code != 125 || !strings.Contains(out, `\x1b]52;c;cHduZWQ=`) { // escaped by the filter, or by devcontainer's %q
			t.Errorf("exit %d; want 125 and the image name escaped in:\n%q", code, out)
		}
	})
}
