// Package backendtest is the conformance suite every sandbash backend passes.
//
// A backend's test calls [Run] with a factory and its [Capabilities]:
//
//	func TestConformance(t *testing.T) {
//		b, err := bwrap.New()
//		if err != nil {
//			backendtest.Unavailable(t, "bwrap", err)
//		}
//		backendtest.Run(t, func(t *testing.T) backend.Backend { ... a new one ... }, backendtest.Capabilities{...})
//	}
//
// Every subtest runs in parallel in fresh directories, under a watchdog that
// turns a hang into a failure. The suite drives backends through the root
// package's Session, so it checks what users get: refusals, timeouts, output
// bounds and spill files included. It never asks which backend it is testing;
// where backends legitimately differ they declare it in Capabilities.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
)

// Factory returns a new backend for one subtest, which the subtest owns:
// the suite closes it when the subtest ends, twice (Close must be
// idempotent).
type Factory func(t *testing.T) backend.Backend

// Capabilities declare where a backend legitimately differs.
type Capabilities struct {
	// Image is the image container backends run; "" for bwrap.
	Image string
	// MemoryLimited, if set, returns a backend whose calls are limited to
	// the given memory; the suite then checks that an out-of-memory kill is
	// reported as such.
	MemoryLimited func(t *testing.T, bytes int64) backend.Backend
	// MemoryPerProcess: MemoryLimited's limit holds per process
	// (RLIMIT_DATA), not per call (no memory cgroup here: bwrap without
	// cgroups, rootless Podman on cgroup v1). The suite then checks that a
	// process over it fails to allocate, and is not reported as killed.
	MemoryPerProcess bool
	// GoImage is an image with a Go toolchain at /usr/local/go, for the
	// real-toolchain cache test; "" runs it on Image (bwrap: the host's).
	GoImage string
	// GitImage is an image like Image with git and curl, for the
	// linked-worktree tests and the egress tests' HTTPS client
	// (scripts/images.sh builds sandbash-test-git); "" runs them on Image
	// (bwrap: the host's git and curl).
	GitImage string
	// Leftovers, if set, lists what the backend still holds for a session
	// (containers, volumes): after Close it must be nothing.
	Leftovers func(t *testing.T, sessionID string) []string
	// Supervised: each call runs under an in-sandbox supervisor that
	// reports completion in-band (the container backends). The suite checks
	// that the command can neither forge that report nor open the
	// supervisor (its parent process).
	Supervised bool
	// EnvImage is an image like Image with an ENV of its own
	// (SANDBASH_IMAGE_CANARY=leak, BASH_ENV and ENV naming
	// /tmp/sandbash-poison) and /etc/passwd and /etc/group entries that put
	// uid 4242 in the extra group 4343 (scripts/images.sh builds it as
	// sandbash-test-env). The suite checks that neither enters a call nor
	// the supervisor; "" skips those tests (bwrap has no image).
	EnvImage string
	// StoredOutput, if set, returns what the engine keeps of the output of
	// the session's containers that exist now (logs, log files, journal),
	// failing t where it can tell the engine is set to keep any. The suite
	// checks that a secret a running call printed is not in it.
	StoredOutput func(t *testing.T, sessionID string) string
	// BridgeGateway is, for container backends, the host's address on the
	// network that containers with the network on join (the default
	// bridge's gateway: 172.17.0.1 on Docker, 10.88.0.1 on Podman). The
	// suite listens there: a sandbox with the network on must reach it,
	// one with the network off must not.
	BridgeGateway string
	// SuidBinds: bind mounts (the workspace, --readable and --writable
	// paths, /tmp, HOME) cannot be made nosuid (Docker's API has no such
	// option); only the caches are checked for nosuid, and the seccomp
	// filter alone keeps setuid files out of the binds.
	SuidBinds bool
	// NetworkNeedsRoot: the network on needs sandbash to run as root
	// (bwrap: sandbash makes each call's network namespace; rootless
	// Podman where the user cannot open /dev/net/tun, which slirp4netns
	// needs); as a user the suite checks that Open refuses it, saying so.
	NetworkNeedsRoot bool
	// SupervisorIsInit: the call supervisor is its container's init (PID
	// 1: no engine init runs it), which the kernel keeps every process of
	// the container from killing. The suite then checks that a command's
	// SIGKILL leaves it unharmed, where it checks that the call ends with
	// no status elsewhere.
	SupervisorIsInit bool
	// Refuses: what the backend refuses at Open rather than gives (see
	// [Refusals]); the suite checks those refusals instead.
	Refuses Refusals
}

// Run runs the conformance suite. It sets environment variables for the
// environment-isolation test, so the calling test must not be parallel.
func Run(t *testing.T, factory Factory, caps Capabilities) {
	t.Setenv("SANDBASH_SUITE_CANARY", "host-secret")
	t.Setenv("SANDBASH_SUITE_PASS", "passed through")
	t.Setenv(egressTokenVar, egressToken)
	tests := []struct {
		name string
		fn   func(*fixture)
	}{
		{"ExitCodes", testExitCodes},
		{"OutputOrder", testOutputOrder},
		{"StdinIsEmpty", testStdin},
		{"WorkingDirectory", testWorkingDirectory},
		{"WorkspaceWriteOwner", testWorkspaceWrite},
		{"NoHostRoot", testNoHostRoot},
		{"NoPrivilegedFiles", testNoPrivilegedFiles},
		{"CommandNotInHostArgv", testCommandNotInHostArgv},
		{"ReadablePathIsReadOnly", testReadable},
		{"WritablePath", testWritable},
		{"HostPathsInvisible", testHostInvisible},
		{"TmpPerSession", testTmpPerSession},
		{"TimeoutTermThenKill", testTimeoutKill},
		{"TimeoutTermSuffices", testTimeoutTerm},
		{"BackgroundProcessesEnd", testBackground},
		{"Cancellation", testCancel},
		{"LargeOutputBounded", testLargeOutput},
		{"SpillFileEqualsStream", testSpill},
		{"EnvironmentIsolation", testEnv},
		{"Refusals", testRefusals},
		{"RawCommandBytes", testRawBytes},
		{"NetworkNone", testNetwork},
		{"EgressPolicy", testEgressPolicy},
		{"EgressCredential", testEgressCredential},
		{"EgressRefusals", testEgressRefusals},
		{"EgressCABundlePlanted", testEgressCABundlePlanted},
		{"ConcurrentSessions", testConcurrentSessions},
		{"Close", testClose},
		{"SessionContract", testSessionContract},
		{"CacheCopyOnWrite", testCacheCopyOnWrite},
		{"CacheExcludesCredentials", testCacheNarrow},
		{"CacheGoToolchain", testGoToolchain},
		{"MountSwapIsRefused", testMountSwap},
		{"HostSocketMasked", testHostSocket},
		{"GitIsNotAWayOut", testGit},
		{"GitWorktree", testWorktree}, {"GitWorktreePlanted", testWorktreePlanted},
		{"SetuidCannotBeCreated", testSetuid},
		{"Seccomp", testSeccomp},
		{"MountsNosuid", testNosuid},
		{"PlantedSymlinkNotFollowed", testPlantedSymlink},
		{"PlantedCacheSymlinkNotFollowed", testPlantedCacheSymlink},
		{"StagingPrivate", testStagingPrivate},
		{"SubmountsAsOnTheHost", testSubmounts},
		{"NoIdmapIsClear", testNoIdmapIsClear},
		{"ForkBombContained", testForkBomb},
		{"TmpBounded", testTmpBounded},
		{"ReviewApply", testReviewApply},
		{"ReviewCheckpoints", testReviewCheckpoints},
		{"ReviewApplyRefuses", testReviewApplyRefuses},
		{"ReviewHostSocketMasked", testReviewHostSocket},
	}
	if caps.MemoryLimited != nil {
		tests = append(tests, []struct {
			name string
			fn   func(*fixture)
		}{{"OOMIsReported", testOOM}, {"MemoryCapped", testMemoryCapped}}...)
	}
	if caps.Supervised {
		tests = append(tests, struct {
			name string
			fn   func(*fixture)
		}{"CompletionCannotBeForged", testForgery}, struct {
			name string
			fn   func(*fixture)
		}{"SandboxEndsCallAtDeadline", testSandboxDeadline}, struct {
			name string
			fn   func(*fixture)
		}{"OutputChannelUnreachable", testChannelUnreachable})
	}
	if caps.EnvImage != "" {
		tests = append(tests, []struct {
			name string
			fn   func(*fixture)
		}{
			{"ImageEnvDoesNotEnter", testImageEnv},
			{"ImageGroupsDoNotEnter", testImageGroups},
			{"SupervisorEnvCannotBePoisoned", testSupervisorEnv},
		}...)
	}
	if caps.StoredOutput != nil {
		tests = append(tests, struct {
			name string
			fn   func(*fixture)
		}{"EngineKeepsNoOutput", testNoStoredOutput})
	}
	pr := &probes{}
	t.Cleanup(pr.remove)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, factory, caps)
			f.probes = pr
			tc.fn(f)
		})
	}
}

func testExitCodes(f *fixture) {
	s := f.open(sandbash.Config{})
	f.expect(s, "true", 0, "")
	f.expect(s, "exit 3", 3, "")
	f.expect(s, "false", 1, "")
	f.expect(s, "kill -KILL $$", 128+9, "")
	f.expect(s, "no-such-command-here 2>/dev/null", 127, "")
}

func testOutputOrder(f *fixture) {
	s := f.open(sandbash.Config{})
	var want strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&want, "out %d\nerr %d\n", i, i)
	}
	f.expect(s, `i=1; while [ $i -le 300 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done`, 0, want.String())
}

func testStdin(f *fixture) {
	s := f.open(sandbash.Config{})
	f.expect(s, "cat; echo done", 0, "done\n")
}

func testWorkingDirectory(f *fixture) {
	ws := f.dir("ws")
	if err := os.WriteFile(filepath.Join(ws, "here.txt"), []byte("in workspace\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: ws})
	f.expect(s, "pwd", 0, ws+"\n")
	f.expect(s, "cat here.txt", 0, "in workspace\n")
	f.expect(s, "cd / && pwd", 0, "/\n")
	f.expect(s, "pwd", 0, ws+"\n")
}

func testWorkspaceWrite(f *fixture) {
	ws := f.dir("ws")
	s := f.open(sandbash.Config{Workspace: ws})
	f.expect(s, "echo hello > made.txt && mkdir sub && echo deep > sub/file", 0, "")
	for name, want := range map[string]string{"made.txt": "hello\n", "sub/file": "deep\n"} {
		p := filepath.Join(ws, name)
		got, err := os.ReadFile(p)
		if err != nil || string(got) != want {
			f.t.Errorf("%s on the host: %q, %v; want %q", name, got, err, want)
			continue
		}
		fi, _ := os.Stat(p)
		st := fi.Sys().(*syscall.Stat_t)
		if int(st.Uid) != f.uid || int(st.Gid) != f.gid {
			f.t.Errorf("%s is owned by %d:%d, want the workspace owner %d:%d", name, st.Uid, st.Gid, f.uid, f.gid)
		}
	}
}

func testReadable(f *fixture) {
	ro := f.dir("ro")
	if err := os.WriteFile(filepath.Join(ro, "data"), []byte("readable\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Readable: []string{ro}})
	f.expect(s, "cat "+ro+"/data", 0, "readable\n")
	r := f.run(s, "{ echo x > "+ro+"/new; } 2>/dev/null || echo refused; rm -f "+ro+"/data 2>/dev/null || echo kept")
	if r.Output != "refused\nkept\n" {
		f.t.Errorf("writes to a readable path: %q", r.Output)
	}
	if _, err := os.Stat(filepath.Join(ro, "new")); err == nil {
		f.t.Error("a write to a readable path reached the host")
	}
	if _, err := os.Stat(filepath.Join(ro, "data")); err != nil {
		f.t.Error("a readable path's file was removed on the host")
	}
}

func testWritable(f *fixture) {
	rw := f.dir("rw")
	s := f.open(sandbash.Config{Writable: []string{rw}})
	f.expect(s, "echo out > "+rw+"/file", 0, "")
	if got, _ := os.ReadFile(filepath.Join(rw, "file")); string(got) != "out\n" {
		f.t.Errorf("write to a writable path: host sees %q", got)
	}
}

func testHostInvisible(f *fixture) {
	secret := f.dir("secret")
	if err := os.WriteFile(filepath.Join(secret, "key"), []byte("s3cret\n"), 0o644); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{})
	f.expect(s, "cat "+secret+"/key 2>/dev/null || echo invisible", 0, "invisible\n")
	if host, err := os.ReadFile("/etc/shadow"); err == nil {
		r := f.run(s, "cat /etc/shadow 2>/dev/null")
		if bytes.Equal([]byte(r.Output), host) && len(host) > 0 {
			f.t.Error("the host's /etc/shadow is readable in the sandbox")
		}
	}
	// An entry of the host's home directory (the caller's, root's) that no
	// mount leads through must not be there.
	for _, home := range []string{os.Getenv("HOME"), "/root"} {
		entries, _ := os.ReadDir(home)
		for _, e := range entries {
			p := filepath.Join(home, e.Name())
			if strings.HasPrefix(f.base+"/", p+"/") || strings.HasPrefix(os.TempDir()+"/", p+"/") {
				continue
			}
			f.expect(s, "test -e '"+p+"' && echo visible || echo invisible", 0, "invisible\n")
			break
		}
	}
}

func testTmpPerSession(f *fixture) {
	a := f.open(sandbash.Config{})
	b := f.open(sandbash.Config{Workspace: f.dir("ws2")})
	f.expect(a, "echo kept > /tmp/note && echo home > ~/note", 0, "")
	f.expect(a, "cat /tmp/note ~/note", 0, "kept\nhome\n")
	f.expect(b, "cat /tmp/note ~/note 2>/dev/null || echo absent", 0, "absent\n")
}

func testTimeoutKill(f *fixture) {
	s := f.open(sandbash.Config{})
	// Both shells survive SIGTERM (they print and carry on), so only the
	// SIGKILL after the grace period ends the call.
	cmd := `trap 'echo main got TERM' TERM
sh -c 'trap "echo child got TERM" TERM; while :; do sleep 0.1; done' &
echo started
while :; do sleep 0.1; done`
	r, err := s.Run(f.ctx, sandbash.Request{Command: cmd, Timeout: time.Second, KillGrace: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	if !r.TimedOut || !r.Killed || r.ExitCode != 128+9 {
		f.t.Errorf("TimedOut=%v Killed=%v exit %d, want both and 137 (SIGKILL)", r.TimedOut, r.Killed, r.ExitCode)
	}
	for _, want := range []string{"started", "main got TERM", "child got TERM"} {
		if !strings.Contains(r.Output, want) {
			f.t.Errorf("output %q lacks %q", r.Output, want)
		}
	}
	if !strings.Contains(r.Observation(), "SIGTERM") || !strings.Contains(r.Observation(), "SIGKILL") {
		f.t.Errorf("observation does not say SIGTERM then SIGKILL: %q", r.Observation())
	}
}

func testTimeoutTerm(f *fixture) {
	s := f.open(sandbash.Config{})
	r, err := s.Run(f.ctx, sandbash.Request{Command: "echo before; sleep 300", Timeout: time.Second, KillGrace: 60 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	if !r.TimedOut || r.Killed || r.Output != "before\n" {
		f.t.Errorf("TimedOut=%v Killed=%v output %q: want a timeout ended by SIGTERM alone, with the partial output", r.TimedOut, r.Killed, r.Output)
	}
}

func testBackground(f *fixture) {
	s := f.open(sandbash.Config{})
	m := marker()
	cmd := fmt.Sprintf(`sh -c 'sleep 300; echo %[1]s-a' &
setsid sh -c 'sleep 300; echo %[1]s-b' &
nohup sh -c 'sleep 300; echo %[1]s-c' >/dev/null 2>&1 &
echo started`, m)
	f.expect(s, cmd, 0, "started\n")
	if left := processesWith(m); len(left) > 0 {
		f.t.Errorf("processes of the call outlived it: %v", left)
	}
}

func testCancel(f *fixture) {
	s := f.open(sandbash.Config{})
	m := marker()
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	live := &liveWriter{want: "ready", seen: make(chan struct{})}
	go func() {
		select {
		case <-live.seen:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := s.Run(ctx, sandbash.Request{Command: fmt.Sprintf("sh -c 'sleep 300; echo %s' & echo ready; sleep 300", m), Live: live})
	if !errors.Is(err, context.Canceled) {
		f.t.Fatalf("Run after cancel: %v, want context.Canceled", err)
	}
	if r == nil || !r.Canceled || !r.Killed || r.ExitCode != 128+9 || !strings.Contains(r.Output, "ready") {
		f.t.Errorf("result after cancel: %+v; want Canceled, Killed, exit 137 (SIGKILL) and the output so far", r)
	}
	if left := processesWith(m); len(left) > 0 {
		f.t.Errorf("processes outlived the cancelled call: %v", left)
	}
}

func testLargeOutput(f *fixture) {
	s := f.open(sandbash.Config{})
	const size = 100 << 20
	// Sample the live heap while the stream passes through: had it been
	// kept, the heap would reach its size. (Total allocation is no proxy:
	// a transport may allocate per frame and free at once.)
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var max uint64
		for {
			metrics.Read(sample)
			max = maxU(max, sample[0].Value.Uint64())
			select {
			case <-stop:
				peak <- max
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	r := f.run(s, fmt.Sprintf("head -c %d /dev/zero | tr '\\0' x", size))
	close(stop)
	if p := <-peak; p > 48<<20 {
		f.t.Errorf("the heap reached %d bytes while capturing %d", p, size)
	}
	if r.OutputBytes != size || !r.Truncated {
		f.t.Errorf("OutputBytes=%d Truncated=%v, want %d and true", r.OutputBytes, r.Truncated, size)
	}
	if len(r.Output) > 31<<10+500 {
		f.t.Errorf("rendered output is %d bytes, want head+tail+marker", len(r.Output))
	}
	if !strings.Contains(r.Output, strconv.Itoa(size)) {
		f.t.Errorf("truncation marker does not give the exact total: %q", r.Output[15<<10:len(r.Output)-15<<10])
	}
	if fi, err := os.Stat(r.SpillPath); err != nil || fi.Size() != 64<<20 {
		f.t.Errorf("spill file %q: %v, size %v; want the default 64 MiB cap", r.SpillPath, err, fi)
	}
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

func testSpill(f *fixture) {
	s := f.open(sandbash.Config{})
	var want bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	r := f.run(s, "seq 1 200000")
	if r.OutputBytes != int64(want.Len()) || !r.Truncated {
		f.t.Fatalf("OutputBytes=%d Truncated=%v, want %d, true", r.OutputBytes, r.Truncated, want.Len())
	}
	got, err := os.ReadFile(r.SpillPath)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		f.t.Errorf("spill file %q (%v) differs from the stream: %d bytes, want %d", r.SpillPath, err, len(got), want.Len())
	}
	w := want.String()
	if !strings.HasPrefix(r.Output, w[:15<<10]) || !strings.HasSuffix(r.Output, w[len(w)-15<<10:]) {
		f.t.Error("rendered output is not the stream's first and last 15 KiB")
	}
	if !strings.Contains(r.Observation(), r.SpillPath) {
		f.t.Error("observation does not name the spill file")
	}
}

func testEnv(f *fixture) {
	s := f.open(sandbash.Config{Env: []string{"SANDBASH_SUITE_PASS", "SANDBASH_SUITE_SET=given value"}})
	r := f.run(s, "env")
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	want := map[string]string{
		"HOME": backend.Home, "TERM": "dumb", "LANG": "C.UTF-8",
		"SANDBASH_SUITE_PASS": "passed through", "SANDBASH_SUITE_SET": "given value",
	}
	for k, v := range want {
		if got[k] != v {
			f.t.Errorf("%s=%q in the sandbox, want %q", k, got[k], v)
		}
	}
	// What the shell or runtime adds by itself is allowed (Podman marks its
	// containers with container=podman); nothing else.
	allowed := map[string]bool{"PATH": true, "PWD": true, "SHLVL": true, "_": true, "OLDPWD": true, "HOSTNAME": true, "container": true}
	for k := range got {
		if _, ok := want[k]; !ok && !allowed[k] {
			f.t.Errorf("unexpected variable in the sandbox: %s=%s", k, got[k])
		}
	}
	if _, ok := got["SANDBASH_SUITE_CANARY"]; ok {
		f.t.Error("a host variable leaked into the sandbox")
	}
}

func testRefusals(f *fixture) {
	ws := f.dir("ws")
	s := f.open(sandbash.Config{Workspace: ws})
	cases := []struct {
		req  sandbash.Request
		want error
	}{
		{sandbash.Request{Command: ""}, sandbash.ErrEmptyCommand},
		{sandbash.Request{Command: " \n\t "}, sandbash.ErrEmptyCommand},
		{sandbash.Request{Command: "touch refused-nul\x00; echo"}, sandbash.ErrNULByte},
		{sandbash.Request{Command: "touch refused-big; #" + strings.Repeat("x", 64<<10)}, sandbash.ErrCommandTooLarge},
		{sandbash.Request{Command: "touch refused-short", Timeout: 500 * time.Millisecond}, sandbash.ErrTimeoutRange},
		{sandbash.Request{Command: "touch refused-long", Timeout: 601 * time.Second}, sandbash.ErrTimeoutRange},
		{sandbash.Request{Command: "touch refused-neg", Timeout: -time.Second}, sandbash.ErrTimeoutRange},
	}
	for _, c := range cases {
		r, err := s.Run(f.ctx, c.req)
		if !errors.Is(err, c.want) || r != nil {
			f.t.Errorf("Run(%.40q, timeout %v) = %v, %v; want refusal %v", c.req.Command, c.req.Timeout, r, err, c.want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(ws, "refused-*")); len(m) > 0 {
		f.t.Errorf("refused commands ran: %v", m)
	}
	f.expect(s, "echo still works", 0, "still works\n")
}

// testRawBytes: the command arrives byte for byte, whatever it holds (every
// byte but NUL, which is refused): no transport may interpret it.
func testRawBytes(f *fixture) {
	s := f.open(sandbash.Config{})
	var raw []byte
	for b := 1; b < 256; b++ {
		if b != '\'' {
			raw = append(raw, byte(b))
		}
	}
	cmd := "x='" + string(raw) + "'; printf '%s' \"$x\" | wc -c | tr -d ' '"
	f.expect(s, cmd, 0, fmt.Sprintf("%d\n", len(raw)))
	f.expect(s, "printf 'a\x10\x11b\x10\x11' | wc -c | tr -d ' '; echo intact", 0, "6\nintact\n")
}

// testNetwork: a session with the network off reaches nothing outside
// its own loopback: not the test host (a server in a network namespace of
// its own, on a private address, reached through the host's routing), not
// the host's loopback, not, on container backends, the host's address on
// the bridge. A session with
// the network on reaches the test host and the bridge (the positive
// controls: a probe that cannot connect anyway proves nothing), but never
// the host's loopback, and it does not share the host's network
// namespace: the host's abstract unix sockets are not even listed.
func testNetwork(f *fixture) {
	if asUser() {
		networkAsUser(f)
		return
	}
	host := newTestHost(f.t)
	none := f.open(sandbash.Config{})
	on := f.open(sandbash.Config{Workspace: f.dir("ws-on"), Network: backend.NetworkOn})
	targets := []netTarget{{"127.0.0.1", false}}
	if f.caps.BridgeGateway != "" {
		// The host's side of the bridge is there while a container is on
		// it (Podman's): wait for the warm one.
		if err := on.WaitWarm(f.ctx); err != nil {
			f.t.Fatal(err)
		}
		targets = append(targets, netTarget{f.caps.BridgeGateway, true})
	}
	probeListeners(f, none, on, targets)
	// localhost still names the sandbox's own loopback without the
	// network: the name resolves through /etc/hosts.
	f.expect(none, `awk '{for (i = 2; i <= NF; i++) if ($i == "localhost") print $1}' /etc/hosts | grep -x 127.0.0.1`, 0, "127.0.0.1\n")
	// The test host, through routing the host does: reached with the
	// network on, not without.
	f.expect(none, tcpProbe(host.Addr, 80), 0, "blocked\n")
	f.expect(on, tcpProbe(host.Addr, 80), 0, "connected\n")
	noHostAbstractSockets(f, none, on)
}

// netTarget is an address the network tests listen on, and whether the
// session with the network on reaches it.
type netTarget struct {
	addr    string
	reaches bool
}

// probeListeners listens on each target's address and probes it from
// none (never reaches it) and from on (reaches it as the target says),
// checking that connections arrive exactly where a probe said so. on may
// be nil (a network the host refused).
func probeListeners(f *fixture, none, on *sandbash.Session, targets []netTarget) {
	for _, tg := range targets {
		l, err := net.Listen("tcp", net.JoinHostPort(tg.addr, "0"))
		if err != nil {
			f.t.Fatalf("listening on %s, where the sandbox is to connect: %v", tg.addr, err)
		}
		accepted := make(chan struct{}, 10)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- struct{}{}
				c.Close()
			}
		}()
		port := l.Addr().(*net.TCPAddr).Port
		f.expect(none, tcpProbe(tg.addr, port), 0, "blocked\n")
		if on != nil && tg.reaches {
			f.expect(on, tcpProbe(tg.addr, port), 0, "connected\n")
			select {
			case <-accepted:
			case <-time.After(time.Minute):
				f.t.Errorf("the sandbox with the network on said it connected to %s, but no connection arrived", tg.addr)
			}
		} else if on != nil {
			f.expect(on, tcpProbe(tg.addr, port), 0, "blocked\n")
		}
		l.Close()
		if n := len(accepted); n > 0 {
			f.t.Errorf("a sandbox that must not reach the host's listener on %s did (%d connections)", tg.addr, n)
		}
	}
}

// noHostAbstractSockets checks that no session lists an abstract unix
// socket the host listens on: abstract sockets belong to a network
// namespace, and a sandbox in the host's would list the host's in
// /proc/net/unix. Nil sessions are left out.
func noHostAbstractSockets(f *fixture, sessions ...*sandbash.Session) {
	name := fmt.Sprintf("sandbash-test-abstract-%d", os.Getpid())
	u, err := net.Listen("unix", "@"+name)
	if err != nil {
		f.t.Fatal(err)
	}
	defer u.Close()
	for _, s := range sessions {
		if s != nil {
			f.expect(s, "grep -c "+name+" /proc/net/unix", 1, "0\n")
		}
	}
}

// tcpProbe is a command that says whether the sandbox can open a TCP
// connection to addr:port: bash's /dev/tcp, bounded, so that a dropped
// packet cannot hang it.
func tcpProbe(addr string, port int) string {
	return fmt.Sprintf("timeout 10 bash -c 'echo hi > /dev/tcp/%s/%d' 2>/dev/null && echo connected || echo blocked", addr, port)
}

func testConcurrentSessions(f *fixture) {
	sessions := []*sandbash.Session{f.open(sandbash.Config{}), f.open(sandbash.Config{Workspace: f.dir("ws2")})}
	errs := make(chan error, len(sessions))
	for i, s := range sessions {
		go func() {
			cmd := fmt.Sprintf("echo %d > /tmp/who; sleep 1; cat /tmp/who; pwd", i)
			r, err := s.Run(f.ctx, sandbash.Request{Command: cmd})
			switch {
			case err != nil:
				errs <- err
			case !strings.HasPrefix(r.Output, fmt.Sprintf("%d\n", i)):
				errs <- fmt.Errorf("session %d saw %q", i, r.Output)
			default:
				errs <- nil
			}
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			f.t.Error(err)
		}
	}
}

func testClose(f *fixture) {
	s, err := sandbash.Open(f.ctx, f.b, sandbash.Config{Workspace: f.dir("ws"), Image: f.caps.Image})
	if err != nil {
		f.t.Fatal(err)
	}
	m := marker()
	type ended struct {
		r   *sandbash.Result
		err error
	}
	ran := make(chan ended, 1)
	live := &liveWriter{want: "ready", seen: make(chan struct{})}
	go func() {
		r, err := s.Run(f.ctx, sandbash.Request{Command: fmt.Sprintf("sh -c 'sleep 300; echo %s' & echo ready; sleep 300", m), Live: live})
		ran <- ended{r, err}
	}()
	select {
	case <-live.seen:
	case e := <-ran:
		f.t.Fatalf("the call ended before it printed ready: %v", e.err)
	}
	if err := s.Close(); err != nil {
		f.t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		f.t.Errorf("second Close: %v", err)
	}
	// Close ended the running call, or this blocks until the watchdog fires.
	if e := <-ran; e.err != nil || e.r == nil || !e.r.Killed || e.r.ExitCode != 128+9 {
		f.t.Errorf("the call Close ended: %+v, %v; want Killed and exit 137 (SIGKILL)", e.r, e.err)
	}
	if left := processesWith(m); len(left) > 0 {
		f.t.Errorf("processes outlived Close: %v", left)
	}
	if f.caps.Leftovers != nil {
		if left := f.caps.Leftovers(f.t, s.ID()); len(left) > 0 {
			f.t.Errorf("objects of the closed session remain: %v", left)
		}
	}
	if _, err := s.Run(f.ctx, sandbash.Request{Command: "true"}); !errors.Is(err, sandbash.ErrClosed) {
		f.t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
}

func testOOM(f *fixture) {
	f.b = f.caps.MemoryLimited(f.t, 32<<20)
	s := f.open(sandbash.Config{})
	r := f.run(s, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo ${#x}`)
	if f.caps.MemoryPerProcess {
		// Bash fails to grow its string past the limit and exits.
		if r.OOMKilled || r.TimedOut || r.ExitCode == 0 || strings.Contains(r.Output, "200000000") {
			f.t.Errorf("200 MB in one process under a 32 MiB per-process limit: OOMKilled=%v TimedOut=%v exit %d; observation:\n%s", r.OOMKilled, r.TimedOut, r.ExitCode, r.Observation())
		}
	} else if !r.OOMKilled || r.TimedOut || !strings.Contains(r.Observation(), "out of memory") {
		f.t.Errorf("OOMKilled=%v TimedOut=%v exit %d; observation:\n%s", r.OOMKilled, r.TimedOut, r.ExitCode, r.Observation())
	}
	if r := f.run(s, "echo fine"); r.OOMKilled || r.Output != "fine\n" {
		f.t.Errorf("the next call: %+v", r)
	}
}

// testForgery: a command cannot end its call early or set its exit status
// by printing a look-alike report, nor open its supervisor ($PPID) to learn
// the real report's secret.
func testForgery(f *fixture) {
	s := f.open(sandbash.Config{})
	forged := "\x1e0123456789abcdef0123456789abcdef 0 0\n"
	f.expect(s, `printf '\0360123456789abcdef0123456789abcdef 0 0\n'; echo after; exit 5`, 5, forged+"after\n")
	if f.caps.SupervisorIsInit {
		// The supervisor is the container's init: the kill does nothing,
		// and the call reports its own status.
		f.expect(s, "echo before; kill -9 1; echo alive; exit 7", 7, "before\nalive\n")
		// The command's parent is the supervisor's helper that waits
		// for it: killing it loses the command's status, and the
		// supervisor ends the call at once, saying why.
		r, err := s.Run(f.ctx, sandbash.Request{Command: "echo before; kill -9 $PPID; sleep 300"})
		if err == nil || !strings.Contains(err.Error(), "killed its supervisor's helpers") || r == nil || !strings.Contains(r.Output, "before") {
			f.t.Errorf("the command's parent killed: %v, %+v", err, r)
		}
	} else {
		// A command that kills its supervisor ends its call, with no status.
		r, err := s.Run(f.ctx, sandbash.Request{Command: "echo before; kill -9 $PPID; sleep 300"})
		if !errors.Is(err, backend.ErrNoExitStatus) || r == nil || !strings.Contains(r.Output, "before") {
			f.t.Errorf("supervisor killed: %v, %+v", err, r)
		}
	}
	f.expect(s, `(exec 3>>/proc/$PPID/fd/1) 2>/dev/null && echo "stdout openable"
(exec 3</proc/$PPID/fd/0) 2>/dev/null && echo "stdin openable"
head -c1 /proc/$PPID/environ >/dev/null 2>&1 && echo "environ readable"
(exec 3</proc/$PPID/mem) 2>/dev/null && echo "mem openable"
echo checked`, 0, "checked\n")
}
