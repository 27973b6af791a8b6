package integration

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/kubernetes/testcluster"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// engine is a backend, and for container backends the image to use (the
// engine's CLI has the backend's name, Kubernetes aside).
type engine struct {
	name, image string
	// more are the flags a subtest's setup added (Kubernetes: the
	// namespace and the workspace's claim, see onCluster).
	more []string
}

var engines = []engine{
	{name: "bwrap"},
	{name: "docker", image: "sandbash-test:latest"},
	{name: "podman", image: "localhost/sandbash-test:latest"},
}

// kubernetes is the backend on the test cluster of scripts/k8s.sh. Only
// forAgentBackends runs it, not forBackend and forEngine, whose tests do
// what a cluster does not have or does differently:
//   - the engine's own CLI (docker create, inspect): TestGCTouchesOnlyItsOwn
//     (the kubernetes package's TestGC makes foreign pods instead), the
//     engine-death tests (which also stop the engine's daemon);
//   - an engine socket handed into a container: TestInsideDevcontainer,
//     TestBwrapBlockedInContainer (sandbash inside a pod is
//     kubernetes_test.go's);
//   - images: the nodes pull them (imagePullPolicy IfNotPresent), so the
//     devcontainer and image-source tests' "never pulled" and "pulling it
//     failed" do not hold as they are written, and the test cluster has no
//     registry to prove the difference on;
//   - TestContainerRunsAsWorkspaceOwner: TestKubernetesCLI checks the same.
var kubernetes = engine{name: "kubernetes", image: "sandbash-test:latest"}

// clusterNamespace is the namespace of the kubernetes subtests' pods.
const clusterNamespace = "default"

// args are the flags that select e.
func (e engine) args() []string {
	if e.image == "" {
		return e.backendArgs()
	}
	return append([]string{"--backend", e.name, "--image", e.image}, e.more...)
}

// backendArgs are the flags that select e, but not an image (which then
// comes from devcontainer.json).
func (e engine) backendArgs() []string {
	return append([]string{"--backend", e.name}, e.more...)
}

// onCluster readies the CLI c for the kubernetes backend, as an admin and
// a user of a cluster would, and returns e with the flags that select
// the claim: sandbash's seccomp profile on the node, a claim of c's
// workspace (and state, which are under the same directory) named after
// the test (the kubernetes package's tests and TestKubernetesCLI make
// claims in the same namespace alongside; so does the in-pod test, as
// sandbash-inpod*), removed when the test ends; a workspace that is not
// root's (pods cannot idmap a claim); the kubeconfig. No cluster: the
// test skips, or fails when SANDBASH_REQUIRE says kubernetes.
func (e engine) onCluster(t *testing.T, c *cli) engine {
	t.Helper()
	cs, err := testcluster.Clientset()
	if err != nil {
		backendtest.Unavailable(t, "kubernetes", err)
	}
	unseccomp, err := testcluster.InstallSeccomp()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unseccomp)
	root := filepath.Dir(c.dir)
	claim := claimName(t)
	unclaim, err := testcluster.LocalClaim(context.Background(), cs, clusterNamespace, claim, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unclaim)
	if os.Getuid() == 0 {
		if err := os.Chown(c.dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	c.env = append(c.env, "KUBECONFIG="+os.Getenv("KUBECONFIG"))
	e.more = []string{"--namespace", clusterNamespace, "--claim", claim + ":" + root}
	return e
}

// claimName is a claim name of the test t and this process (another test
// binary may run the same test on the same cluster).
func claimName(t *testing.T) string {
	n := strings.Trim(regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(strings.ToLower(strings.TrimPrefix(t.Name(), "Test")), "-"), "-")
	sum := sha256.Sum256([]byte(t.Name()))
	suffix := fmt.Sprintf("-%x-%d", sum[:3], os.Getpid())
	if room := 50 - len("sbit-") - len(suffix); len(n) > room {
		n = strings.TrimRight(n[:room], "-")
	}
	return "sbit-" + n + suffix
}

// forEngine runs test once per container backend but Kubernetes, as a
// subtest named after it; a backend sandbash cannot use here skips (or
// fails when required).
func forEngine(t *testing.T, test func(t *testing.T, e engine, c *cli)) {
	forBackend(t, false, test)
}

// forBackend runs test once per backend but Kubernetes (bwrap too,
// withBwrap).
func forBackend(t *testing.T, withBwrap bool, test func(t *testing.T, e engine, c *cli)) {
	forEach(t, backends(withBwrap), test)
}

// backends are engines, bwrap only withBwrap.
func backends(withBwrap bool) []engine {
	var es []engine
	for _, e := range engines {
		if e.image != "" || withBwrap {
			es = append(es, e)
		}
	}
	return es
}

// forAgentBackends runs test once per backend, Kubernetes too (bwrap only
// withBwrap): the tests of what an agent and its user do with sandbash
// (run, sessions, MCP), which the cluster does as the other backends do or
// refuses by design (caches, overlay workspaces), which the test then
// asserts on Kubernetes instead. The unprivileged leg
// (scripts/test-user.sh) does not select the kubernetes subtests: its test
// cluster is up for the root leg only.
func forAgentBackends(t *testing.T, withBwrap bool, test func(t *testing.T, e engine, c *cli)) {
	forEach(t, append(backends(withBwrap), kubernetes), test)
}

func forEach(t *testing.T, es []engine, test func(t *testing.T, e engine, c *cli)) {
	for _, e := range es {
		t.Run(e.name, func(t *testing.T) {
			c := newCLI(t)
			if e.name == kubernetes.name {
				// onCluster found the cluster: a call that fails on
				// it fails the test.
				e = e.onCluster(t, c)
			} else if out, errOut, code := c.run(append(append([]string{"run"}, e.args()...), "--", "true")...); code != 0 {
				backendtest.Unavailable(t, e.name, fmt.Errorf("sandbash run --backend %s: exit %d: %s%s", e.name, code, out, errOut))
			}
			test(t, e, c)
		})
	}
}

// objects lists the sandbash-labelled containers and volumes that the
// process with PID pid owns (other test packages run alongside), through
// the engine's own CLI; on Kubernetes, the pods in the namespace of
// onCluster (sandbash makes no other objects there).
func objects(t *testing.T, engine string, pid int) []string {
	t.Helper()
	var out []string
	if engine == kubernetes.name {
		cs, err := testcluster.Clientset()
		if err != nil {
			t.Fatal(err)
		}
		ps, err := cs.CoreV1().Pods(clusterNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: container.LabelSession})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Items {
			if strings.Contains(p.Annotations[container.LabelOwner], fmt.Sprintf("/%d/", pid)) {
				out = append(out, "pod "+p.Name)
			}
		}
		return out
	}
	for _, kind := range []struct{ list, inspect []string }{
		{[]string{"ps", "-aq", "--no-trunc"}, []string{"inspect", "--format", `{{index .Config.Labels "` + container.LabelOwner + `"}}`}},
		{[]string{"volume", "ls", "-q"}, []string{"volume", "inspect", "--format", `{{index .Labels "` + container.LabelOwner + `"}}`}},
	} {
		ids, err := exec.Command(engine, append(kind.list, "--filter", "label="+container.LabelSession)...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", engine, kind.list, err)
		}
		for _, id := range strings.Fields(string(ids)) {
			owner, err := exec.Command(engine, append(kind.inspect, id)...).Output()
			if err == nil && strings.Contains(string(owner), fmt.Sprintf("/%d/", pid)) {
				out = append(out, kind.list[0]+" "+id)
			}
		}
	}
	return out
}

func TestContainerRunsAsWorkspaceOwner(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		want := fmt.Sprint(os.Getuid())
		if os.Getuid() == 0 {
			want = "4242"
			if err := os.Chown(c.dir, 4242, 4242); err != nil {
				t.Fatal(err)
			}
		}
		out, errOut, code := c.run("run", "--backend", e.name, "--image", e.image, "--", "id -u")
		if code != 0 || strings.TrimSpace(out) != want {
			t.Errorf("id -u: %q (exit %d, %s), want %s", out, code, errOut, want)
		}
	})
}

func TestContainerImageSources(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		// No image anywhere: a clear error that says how to give one.
		_, errOut, code := c.run("run", "--backend", e.name, "--", "true")
		if code != 125 || !strings.Contains(errOut, "--image") || !strings.Contains(errOut, "SANDBASH_IMAGE") {
			t.Errorf("no image: exit %d, %s", code, errOut)
		}
		// An image that is not here and cannot be pulled.
		_, errOut, code = c.run("run", "--backend", e.name, "--image", "sandbash-no-such-image:1", "--", "touch ran")
		if code != 125 || !strings.Contains(errOut, "pulling it failed") {
			t.Errorf("missing image: exit %d, %s", code, errOut)
		}
		// devcontainer.json, with comments and a trailing comma.
		dc := filepath.Join(c.dir, ".devcontainer")
		os.Mkdir(dc, 0o755)
		os.WriteFile(filepath.Join(dc, "devcontainer.json"), []byte("{\n  // test image\n  \"image\": \""+e.image+"\",\n}\n"), 0o644)
		if _, errOut, code := c.run("trust"); code != 0 {
			t.Errorf("trust: exit %d %s", code, errOut)
		}
		out, errOut, code := c.run("run", "--backend", e.name, "--", "test -x /bin/busybox && echo in-image")
		if code != 0 || out != "in-image\n" {
			t.Errorf("devcontainer image: exit %d, %q, %s", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "ran")); err == nil {
			t.Error("a call ran although its image was missing")
		}
	})
}

// TestGCAfterKill kills the CLI mid-call with SIGKILL, so nothing of it
// cleans up, on every backend; then gc must leave nothing of it behind:
// containers, volumes, staged mounts, session directories.
func TestGCAfterKill(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		mark := fmt.Sprintf("sbgckill%d", time.Now().UnixNano())
		cache, gc := []string{"--cache-dir", t.TempDir() + ":/home/sandbash/c"}, []string{"gc"}
		if e.name == kubernetes.name {
			refusesCaches(t, c, append(append(append([]string{"run"}, e.args()...), cache...), "--", "true"))
			cache, gc = nil, []string{"gc", "--namespace", clusterNamespace}
		}
		cmd := c.cmd(append(append(append([]string{"run"}, e.args()...), cache...), "--", "bash -c 'echo ready; sleep 300; :' "+mark)...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || line != "ready\n" {
			t.Fatalf("read %q, %v", line, err)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		pid := cmd.Process.Pid
		left := func() []string {
			var l []string
			if e.image != "" {
				l = objects(t, e.name, pid)
			}
			l = append(l, stagedMounts(pid)...)
			dirs, _ := filepath.Glob(filepath.Join(c.state(), "sandbash", "runs", "*"))
			// bwrap's cgroups (as root), named after the process.
			for _, pattern := range []string{"/sys/fs/cgroup/*/sandbash/%d.*", "/sys/fs/cgroup/sandbash/%d.*"} {
				cg, _ := filepath.Glob(fmt.Sprintf(pattern, pid))
				dirs = append(dirs, cg...)
			}
			return append(l, dirs...)
		}
		if len(left()) == 0 {
			t.Fatal("nothing was left to collect: the test proves nothing")
		}
		out, errOut, code := c.run(gc...)
		if code != 0 {
			t.Fatalf("gc: exit %d: %s %s", code, out, errOut)
		}
		if l := left(); len(l) > 0 {
			t.Errorf("after gc: %v (gc said %q)", l, out)
		}
		if procs := processesMentioning(mark, "cmdline"); len(procs) > 0 {
			t.Errorf("processes of the killed call are still running after gc: %s", procs)
		}
	})
}

// TestRunReapsAfterKill: every `sandbash run` sweeps what sandbash
// processes that died left behind before it exits (it does so while its
// own call runs), as gc does: after a run killed mid-call, the next plain
// run leaves nothing of it (staged mounts, session directory, bwrap's
// cgroups), with no gc.
func TestRunReapsAfterKill(t *testing.T) {
	c := newCLI(t)
	mark := fmt.Sprintf("sbrunreap%d", time.Now().UnixNano())
	cmd := c.cmd("run", "--backend", "bwrap", "--", "bash -c 'echo ready; sleep 300; :' "+mark)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("read %q, %v", line, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	pid := cmd.Process.Pid
	left := func() []string {
		l := stagedMounts(pid)
		dirs, _ := filepath.Glob(filepath.Join(c.state(), "sandbash", "runs", "*"))
		for _, pattern := range []string{"/sys/fs/cgroup/*/sandbash/%d.*", "/sys/fs/cgroup/sandbash/%d.*"} {
			cg, _ := filepath.Glob(fmt.Sprintf(pattern, pid))
			dirs = append(dirs, cg...)
		}
		return append(l, dirs...)
	}
	if len(left()) == 0 {
		t.Fatal("nothing was left to collect: the test proves nothing")
	}
	if out, errOut, code := c.run("run", "--backend", "bwrap", "--", "true"); code != 0 {
		t.Fatalf("run: exit %d: %s %s", code, out, errOut)
	}
	if l := left(); len(l) > 0 {
		t.Errorf("after the next run: %v", l)
	}
	if procs := processesMentioning(mark, "cmdline"); len(procs) > 0 {
		t.Errorf("processes of the killed call are still running after the next run: %s", procs)
	}
}

// stagedMounts lists what sandbash process pid staged in /run/sandbash (as
// root), and the mounts below it.
func stagedMounts(pid int) []string {
	var dirs, out []string
	all, _ := filepath.Glob("/run/sandbash/*")
	for _, d := range all {
		owner, err := os.ReadFile(filepath.Join(d, ".owner"))
		if err == nil && strings.Contains(string(owner), fmt.Sprintf("/%d/", pid)) {
			dirs = append(dirs, d)
		}
	}
	info, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(info), "\n") {
		for _, d := range dirs {
			if strings.Contains(line, " "+d+"/") {
				out = append(out, line)
			}
		}
	}
	return append(dirs, out...)
}

// TestSessionOtherOwnerPrivateState: root runs sandbash for a workspace
// another user owns, with its state directory under a 0700 home (root's
// own /root, say). The session's /tmp and HOME live there, where the
// sandbox user cannot reach by path; a CLI session must still work.
func TestSessionOtherOwnerPrivateState(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root: the case is root invoking sandbash for another user's workspace")
	}
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		home := filepath.Join(filepath.Dir(c.dir), "roothome")
		if err := os.Mkdir(home, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(c.dir, 4242, 4242); err != nil {
			t.Fatal(err)
		}
		c.env = append(c.env, "HOME="+home, "XDG_STATE_HOME="+filepath.Join(home, ".local", "state"))
		out, errOut, code := c.run(append(append([]string{"session", "open"}, e.args()...), "--workspace", c.dir)...)
		id := strings.TrimSpace(out)
		if code != 0 || id == "" {
			t.Fatalf("session open: exit %d: %s%s", code, out, errOut)
		}
		defer c.run("session", "close", id)
		out, errOut, code = c.run("run", "--session", id, "--", "echo t > /tmp/t && echo h > ~/h && touch made && id -u")
		if code != 0 || out != "4242\n" {
			t.Fatalf("run --session: exit %d: %q %s", code, out, errOut)
		}
		out, errOut, code = c.run("run", "--session", id, "--", "cat /tmp/t ~/h")
		if code != 0 || out != "t\nh\n" {
			t.Errorf("second run: exit %d: %q %s", code, out, errOut)
		}
		if fi, err := os.Stat(filepath.Join(c.dir, "made")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 4242 {
			t.Errorf("made: %v, %v", fi, err)
		}
	})
}

// TestGCTouchesOnlyItsOwn: gc removes what a dead sandbash of the caller's
// uid left, never another user's (unless root says --all), and never what
// a live process owns.
func TestGCTouchesOnlyItsOwn(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		dead := exec.Command("true")
		if err := dead.Run(); err != nil {
			t.Fatal(err)
		}
		self := strings.Split(container.Owner(), "/")
		identity := func(uid, pid int) string {
			return strings.Join([]string{self[0], self[1], self[2], strconv.Itoa(uid), strconv.Itoa(pid), "1"}, "/")
		}
		create := func(owner string) string {
			out, err := exec.Command(e.name, "create", "--label", container.LabelSession+"=gctest", "--label", container.LabelOwner+"="+owner, e.image, "true").Output()
			if err != nil {
				t.Fatalf("%s create: %v", e.name, err)
			}
			id := strings.TrimSpace(string(out))
			t.Cleanup(func() { _ = exec.Command(e.name, "rm", "-f", id).Run() })
			return id
		}
		exists := func(id string) bool { return exec.Command(e.name, "inspect", id).Run() == nil }
		mine := create(identity(os.Geteuid(), dead.Process.Pid))
		others := create(identity(os.Geteuid()+4242, dead.Process.Pid))
		live := create(container.Owner())
		if out, errOut, code := c.run("gc"); code != 0 {
			t.Fatalf("gc: exit %d: %s%s", code, out, errOut)
		}
		if exists(mine) {
			t.Error("gc left a dead owner's container of the caller's uid")
		}
		if !exists(others) {
			t.Error("gc removed another user's container without --all")
		}
		if !exists(live) {
			t.Error("gc removed a live owner's container")
		}
		if os.Geteuid() == 0 {
			if out, errOut, code := c.run("gc", "--all"); code != 0 {
				t.Fatalf("gc --all: exit %d: %s%s", code, out, errOut)
			}
			if exists(others) {
				t.Error("gc --all as root left another user's dead owner's container")
			}
			if !exists(live) {
				t.Error("gc --all removed a live owner's container")
			}
		}
	})
}

// TestGCSweepsLibrarySessions: a program using the library keeps its
// session directories in the temporary directory by default; gc removes
// those a dead process of the caller's left, and nothing else there: not
// a live process's, not one marked by anyone but the caller (a shared
// /tmp lets anyone make a directory whose mark names a dead process), not
// one that is not named as a session directory.
func TestGCSweepsLibrarySessions(t *testing.T) {
	c := newCLI(t)
	tmp := t.TempDir()
	c.env = append(c.env, "TMPDIR="+tmp)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	self := strings.Split(container.Owner(), "/")
	gone := strings.Join([]string{self[0], self[1], self[2], self[3], strconv.Itoa(dead.Process.Pid), "1"}, "/")
	mk := func(name, mark string) string {
		d := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(d, "home"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, ".owner"), []byte(mark), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	left := mk("sandbash-deadsession-1", gone)
	live := mk("sandbash-livesession-1", container.Owner())
	other := mk("othertool-1", gone)
	forged := mk("sandbash-forged-1", "")
	os.Remove(filepath.Join(forged, ".owner"))
	// Not the caller's mark: as root, a file of another uid; as a user,
	// a symlink to a mark of the caller's (anyone can make one of those).
	if os.Geteuid() == 0 {
		if err := os.WriteFile(filepath.Join(forged, ".owner"), []byte(gone), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(filepath.Join(forged, ".owner"), 4242, 4242); err != nil {
			t.Fatal(err)
		}
	} else if err := os.Symlink(filepath.Join(left, ".owner"), filepath.Join(forged, ".owner")); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := c.run("gc")
	if code != 0 {
		t.Fatalf("gc: exit %d: %s%s", code, out, errOut)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("gc left a dead process's session directory in the temporary directory (%v); it said %q", err, out)
	}
	if !strings.Contains(out, "session: removed "+left) {
		t.Errorf("gc did not say it removed %s: %q", left, out)
	}
	for _, d := range []string{live, other, forged} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("gc removed %s: %v", d, err)
		}
	}
}

// TestOneShotEndsWithoutAKill: a one-shot `sandbash run` neither kills nor
// removes its container once the call reported; it leaves that to the
// container's PID 1, the supervisor, which exits at the end of its stdin,
// and to the engine (docker run --rm). So a command must not be able to
// keep the container alive past the run: not by taking over PID 1
// through /proc/1/mem (an engine init, docker-init or catatonit, running
// as the call's user and dumpable, could be), nor by leaving processes
// behind that ignore SIGTERM and SIGHUP.
func TestOneShotEndsWithoutAKill(t *testing.T) {
	forEngine(t, func(t *testing.T, e engine, c *cli) {
		for _, tc := range []struct{ name, command string }{
			{"hijack", backendtest.HijackInit},
			{"orphan", `(trap "" TERM HUP; exec sleep 300) & (trap "" TERM HUP; setsid sleep 300 &); echo left`},
		} {
			cmd := c.cmd(append(append([]string{"run"}, e.args()...), "--", tc.command)...)
			out, err := cmd.CombinedOutput()
			if strings.Contains(string(out), "init is sleep") {
				t.Errorf("%s: a command took over its container's PID 1: %v: %s", tc.name, err, out)
			}
			pid := cmd.Process.Pid
			left := objects(t, e.name, pid)
			for deadline := time.Now().Add(30 * time.Second); len(left) > 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				left = objects(t, e.name, pid)
			}
			if len(left) > 0 {
				t.Errorf("%s: 30 s after the run exited, its container remains: %v (%s)", tc.name, left, out)
			}
		}
	})
}
