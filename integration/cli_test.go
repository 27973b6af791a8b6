// Package integration runs the sandbash binary end to end against real
// backends. Tests of a backend that cannot run here skip, or fail when the
// run demands it (SANDBASH_REQUIRE, see backend/backendtest).
package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/bwrap"
)

var binary string

// binaryEnv names a sandbash binary already built with this package's
// tags, for runs where this process cannot build one (make test-user: the
// unprivileged user has no module cache).
const binaryEnv = "SANDBASH_TEST_BINARY"

func TestMain(m *testing.M) {
	if binary = os.Getenv(binaryEnv); binary != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "sbbin-")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "sandbash")
	args := []string{"build", "-o", binary}
	if buildTags != "" {
		args = append(args, "-tags", buildTags)
	}
	// And the build with the Kubernetes backend, next to it, which
	// sandbash hands --backend kubernetes, doctor and gc to.
	k8s := []string{"build", "-o", filepath.Join(dir, "sandbash-kubernetes"), "-tags", strings.Trim(buildTags+",sandbash_kubernetes", ",")}
	for _, a := range [][]string{args, k8s} {
		if out, err := exec.Command("go", append(a, "../cmd/sandbash")...).CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			panic("building sandbash: " + err.Error() + "\n" + string(out))
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// cli runs sandbash with args in workspace dir and returns stdout, stderr
// and the exit status.
type cli struct {
	t   *testing.T
	dir string
	env []string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	if _, err := bwrap.New(); err != nil {
		backendtest.Unavailable(t, "bwrap", err)
	}
	base, err := os.MkdirTemp("", "sbcli-")
	t.Cleanup(func() { os.RemoveAll(base) })
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "ws")
	state := filepath.Join(base, "state")
	for _, d := range []string{ws, state} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return &cli{t: t, dir: ws, env: append(os.Environ(), "XDG_STATE_HOME="+state)}
}

// state is the XDG_STATE_HOME the CLI runs with.
func (c *cli) state() string {
	state := ""
	for _, e := range c.env { // the last one counts, as in exec
		if v, ok := strings.CutPrefix(e, "XDG_STATE_HOME="); ok {
			state = v
		}
	}
	return state
}

func (c *cli) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	return cmd
}

func (c *cli) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	cmd := c.cmd(args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	// No controlling terminal: --confirm must refuse, not hang.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errorsAs(err, &ee) {
		c.t.Fatalf("running sandbash: %v", err)
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

func TestExitStatusPassesThrough(t *testing.T) {
	c := newCLI(t)
	out, errOut, code := c.run("run", "--backend", "bwrap", "--", "echo", "out;", "echo", "err", ">&2;", "exit", "7")
	if code != 7 || out != "out\nerr\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want 7 and both lines on stdout", code, out, errOut)
	}
}

func TestIDIsWorkspaceOwner(t *testing.T) {
	c := newCLI(t)
	want := os.Getuid()
	if want == 0 {
		want = 4242
		if err := os.Chown(c.dir, want, want); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := c.run("run", "--backend", "bwrap", "--", "id -u; touch made")
	if code != 0 || strings.TrimSpace(out) != strconv.Itoa(want) {
		t.Fatalf("id -u: %q (exit %d, %s), want %d", out, code, errOut, want)
	}
	fi, err := os.Stat(filepath.Join(c.dir, "made"))
	if err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != want {
		t.Errorf("file made in the workspace: %v, %v; want owner %d", fi, err, want)
	}
}

func TestTimeoutExits124(t *testing.T) {
	c := newCLI(t)
	out, errOut, code := c.run("run", "--backend", "bwrap", "--timeout", "1", "--", "echo partial; sleep 30")
	if code != 124 || out != "partial\n" || !strings.Contains(errOut, "SIGTERM") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 124, the partial output, and a timeout message", code, out, errOut)
	}
}

func TestRefusalsExit125AndRunNothing(t *testing.T) {
	c := newCLI(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--", " "}, "nothing to run"},
		{[]string{"run"}, "no command given"},
		{[]string{"run", "--timeout", "0", "--", "touch ran"}, "between 1 and 600"},
		{[]string{"run", "--timeout", "601", "--", "touch ran"}, "between 1 and 600"},
		{[]string{"run", "--readable", "/run", "--", "touch ran"}, "control socket"},
		{[]string{"run", "--readable", "/var/run/docker.sock", "--", "touch ran"}, "control socket"},
		{[]string{"run", "--writable", "/", "--", "touch ran"}, "read-write"},
		{[]string{"run", "--network", "host", "--", "touch ran"}, "none or on|give --network none"},
		{[]string{"run", "--env", "1BAD", "--", "touch ran"}, "not a variable name|--env NAME=VALUE"},
		{[]string{"run", "--env", "LD_PRELOAD=/tmp/x.so", "--", "touch ran"}, "set it inside the command|drop it from --env"},
		{[]string{"run", "--env", "PATH", "--", "touch ran"}, "export PATH=DIR:$PATH"},
		{[]string{"run", "--backend", "lxc", "--", "touch ran"}, "auto, bwrap, docker, podman or kubernetes"},
		{[]string{"run", "--backend", "bwrap", "--image", "img", "--", "touch ran"}, "takes no image"},
		{[]string{"run", "--confirm", "--", "touch ran"}, "needs a terminal"},
		{[]string{"run", "--allow", "https://example.com", "--", "touch ran"}, "accepted forms|check --allow"},
		{[]string{"run", "--allow", "example.com", "--network", "on", "--", "touch ran"}, "drop one"},
		{[]string{"run", "--egress-log", "log.json", "--", "touch ran"}, "add --allow"},
		{[]string{"run", "--json", "--observation", "--", "touch ran"}, "exclusive"},
	}
	for _, tc := range cases {
		out, errOut, code := c.run(tc.args...)
		// want is "|"-separated: the library's words, then the CLI's
		// hint naming the flag.
		missing := slices.ContainsFunc(strings.Split(tc.want, "|"), func(w string) bool { return !strings.Contains(out+errOut, w) })
		if code != 125 || missing {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
		t.Error("a refused command ran")
	}
}

func TestJSON(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("run", "--json", "--", "seq 1 100000; exit 3")
	if code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if dec.More() {
		t.Error("stdout holds more than one JSON value")
	}
	for _, k := range []string{"backend", "command", "exit_code", "timed_out", "oom_killed", "duration_ms", "output", "output_bytes", "truncated", "spill_path", "error"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if obj["backend"] != "bwrap" || obj["exit_code"] != 3.0 || obj["truncated"] != true || obj["output_bytes"] != 588895.0 {
		t.Errorf("JSON = %v", obj)
	}
	spill, _ := obj["spill_path"].(string)
	if fi, err := os.Stat(spill); err != nil || fi.Size() != 588895 {
		t.Errorf("spill file %q after exit: %v", spill, err)
	}
	out, _, code = c.run("run", "--json", "--", "")
	if err := json.Unmarshal([]byte(out), &obj); err != nil || code != 125 || obj["exit_code"] != nil || obj["error"] == "" {
		t.Errorf("refusal in JSON: exit %d, %s", code, out)
	}
}

func TestObservation(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("run", "--observation", "--", "printf 'hidden\\rshown\\n' # \r\x1b[2Kinnocent")
	want := "$ printf 'hidden\\rshown\\n' # \\r\\x1b[2Kinnocent\nhidden\rshown\nexit status: 0\n"
	if code != 0 || out != want {
		t.Errorf("observation:\n%q\nwant\n%q", out, want)
	}
}

func TestInterruptEndsTheCall(t *testing.T) {
	c := newCLI(t)
	mark := "sbint" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cmd := c.cmd("run", "--", "sh -c 'sleep 300; echo "+mark+"' & echo ready; sleep 300")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := stdout.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("read %q, %v", buf, err)
	}
	// The call's processes that hold the mark, read from /proc (not pgrep,
	// whose absence would pass for "none left"); the CLI's own argv holds
	// the command too.
	marked := func() []string {
		return slices.DeleteFunc(processesMentioning(mark, "cmdline"), func(pid string) bool { return pid == strconv.Itoa(cmd.Process.Pid) })
	}
	// The background process is there before the interrupt, or nothing
	// below could fail.
	for end := time.Now().Add(30 * time.Second); len(marked()) == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("the call's background process never showed up in /proc: the test proves nothing")
		}
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d after SIGINT, want 130", code)
	}
	if left := marked(); len(left) > 0 {
		t.Errorf("processes outlived the interrupted call: %v", left)
	}
}

func TestEnvPassthrough(t *testing.T) {
	c := newCLI(t)
	c.env = append(c.env, "SB_FROM_HOST=yes", "SB_HIDDEN=no")
	out, _, code := c.run("run", "--env", "SB_FROM_HOST", "--env", "SB_SET=v", "--", "echo $SB_FROM_HOST $SB_SET ${SB_HIDDEN:-unset}")
	if code != 0 || out != "yes v unset\n" {
		t.Errorf("exit %d, %q", code, out)
	}
}

func TestDoctorAndHelp(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("doctor")
	if code != 0 || !strings.Contains(out, "bwrap:  available") || !strings.Contains(out, "docker") || !strings.Contains(out, "podman") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "seccomp: sandbash's filter in force on every call") {
		t.Errorf("doctor does not report bwrap's seccomp filter:\n%s", out)
	}
	_, errOut, code := c.run("run", "--help")
	if code != 0 || !strings.Contains(errOut, "Exit status") || !strings.Contains(errOut, "-readable") {
		t.Errorf("run --help: exit %d\n%s", code, errOut)
	}
	out, _, code = c.run("help")
	if code != 0 || !strings.Contains(out, "sandbash run") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
}

func TestGCPrunesOldOutputs(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("run", "--json", "--", "seq 1 100000")
	var obj map[string]any
	json.Unmarshal([]byte(out), &obj)
	spill, _ := obj["spill_path"].(string)
	if code != 0 || spill == "" {
		t.Fatalf("no spill file: exit %d %s", code, out)
	}
	if _, _, code := c.run("gc"); code != 0 {
		t.Fatalf("gc: exit %d", code)
	}
	if _, err := os.Stat(spill); err != nil {
		t.Fatalf("gc deleted a fresh output: %v", err)
	}
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(spill, old, old)
	if out, _, code := c.run("gc"); code != 0 || !strings.Contains(out, "deleted 1 saved output") {
		t.Fatalf("gc: exit %d %q", code, out)
	}
	if _, err := os.Stat(spill); !os.IsNotExist(err) {
		t.Errorf("an old output survived gc: %v", err)
	}
}

// TestBwrapTakesLimits: --memory and --pids apply on bwrap, and doctor
// says how.
func TestBwrapTakesLimits(t *testing.T) {
	c := newCLI(t)
	out, _, code := c.run("doctor")
	if code != 0 || !strings.Contains(out, "limits: ") {
		t.Errorf("doctor does not say how bwrap limits calls: exit %d\n%s", code, out)
	}
	// Forty sleeps cannot all start under --pids 32; the loop stops at
	// the first refused fork (dash gives up at once, unlike bash).
	out, errOut, code := c.run("run", "--backend", "bwrap", "--memory", "256m", "--pids", "32", "--",
		`sh -c 'i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); echo $i > /tmp/n; done' 2>/dev/null; read n < /tmp/n; echo "started $n"`)
	rest, ok := strings.CutPrefix(out, "started ")
	n, err := strconv.Atoi(strings.TrimSpace(rest))
	if !ok || err != nil || code != 0 || n >= 40 {
		t.Errorf("--pids 32: exit %d, stdout %q, stderr %q; want fewer than 40 started", code, out, errOut)
	}
}

// egressRefusedAsUser: egress rules need root (sandbash makes each call's
// network namespace); as a user, a run with them is refused, saying so and
// what to do, before anything runs or anything is logged (the log may be
// created, empty: it is opened before the backend refuses).
func egressRefusedAsUser(t *testing.T, c *cli) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "egress.json")
	out, errOut, code := c.run("run", "--backend", "bwrap", "--allow", "allowed.test", "--egress-log", logPath, "--", "touch ran")
	if code != 125 || !strings.Contains(errOut, "egress rules") || !strings.Contains(errOut, "run sandbash as root") {
		t.Errorf("as uid %d, egress rules: exit %d, stdout %q, stderr %q; want 125 and a refusal saying to run as root", os.Geteuid(), code, out, errOut)
	}
	if _, err := os.Lstat(filepath.Join(c.dir, "ran")); err == nil {
		t.Error("the refused command ran")
	}
	if b, err := os.ReadFile(logPath); len(b) > 0 || (err != nil && !os.IsNotExist(err)) {
		t.Errorf("the refused run logged %q (%v)", b, err)
	}
}

// TestEgressDeniedReported: a destination the --allow rules do not cover
// is refused by the proxy, and the refusal reaches the user three ways:
// the client's 403, egress_denied in --json, and the --egress-log line.
func TestEgressDeniedReported(t *testing.T) {
	c := newCLI(t)
	if os.Geteuid() != 0 {
		egressRefusedAsUser(t, c)
		return
	}
	logPath := filepath.Join(t.TempDir(), "egress.json")
	req := `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n' >&3 && head -1 <&3`
	out, errOut, code := c.run("run", "--backend", "bwrap", "--json", "--allow", "allowed.test", "--egress-log", logPath, "--", req)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var res struct {
		Output       string   `json:"output"`
		EgressDenied []string `json:"egress_denied"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(res.Output, "403") || !slices.Equal(res.EgressDenied, []string{"denied.test:80"}) {
		t.Errorf("output %q, egress_denied %q; want a 403 and [denied.test:80]", res.Output, res.EgressDenied)
	}
	log, err := os.ReadFile(logPath)
	if err != nil || !strings.Contains(string(log), `"denied.test"`) || !strings.Contains(string(log), `"deny"`) {
		t.Errorf("egress log %q (%v); want a deny line for denied.test", log, err)
	}
}

// TestEgressLogPlanted: sandbash (root, for egress rules) opens the
// --egress-log anew at every run. A log inside the workspace is a name
// calls can replace: a symlink there must not get the next run to append
// to (or create) the host file it names, whose lines a call partly writes
// (the names it asks for). Either the log is refused there, or it is
// never followed.
func TestEgressLogPlanted(t *testing.T) {
	c := newCLI(t)
	if os.Geteuid() != 0 {
		egressRefusedAsUser(t, c)
		return
	}
	victim := filepath.Join(t.TempDir(), "precious")
	const precious = "precious\n"
	if err := os.WriteFile(victim, []byte(precious), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(c.dir, "egress.log")
	flags := []string{"run", "--backend", "bwrap", "--allow", "allowed.test", "--egress-log", logPath, "--"}
	_, _, _ = c.run(append(flags, "rm -f egress.log && ln -s "+victim+" egress.log")...)
	req := `exec 3<>/dev/tcp/127.0.0.1/3128 && printf 'GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n' >&3 && head -1 <&3`
	_, _, _ = c.run(append(flags, req)...)
	if b, err := os.ReadFile(victim); err != nil || string(b) != precious {
		t.Errorf("the host file a call's symlink named was written as the egress log: %q, %v", b, err)
	}
}
