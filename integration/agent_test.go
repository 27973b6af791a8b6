package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash/backend/backendtest"
)

func toolText(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPOverStdio drives `sandbash mcp` as an agent does: the official Go
// SDK client over the process's stdio.
func TestMCPOverStdio(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		cache := []string{"--cache-dir", c.dir + "/../hostcache:/home/sandbash/hc"}
		os.MkdirAll(filepath.Join(c.dir, "../hostcache"), 0o755)
		if e.name == kubernetes.name {
			refusesCaches(t, c, append([]string{"mcp"}, append(e.args(), cache...)...))
			cache = nil
		}
		cmd := c.cmd(append(append([]string{"mcp"}, cache...), e.args()...)...)
		ctx := context.Background()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) != 1 || !strings.Contains(tools.Tools[0].Description, "backend "+e.name) {
			t.Fatalf("tools/list: %+v %v", tools, err)
		}
		run := func(command string) (string, bool) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
			if err != nil {
				t.Fatalf("tools/call %q: %v", command, err)
			}
			return toolText(t, res), res.IsError
		}
		if text, isErr := run("pwd; echo kept > /tmp/k; echo cached > ~/hc/f"); isErr || !strings.Contains(text, c.dir) {
			t.Errorf("first call: isError=%v %q", isErr, text)
		}
		if cache == nil {
			if text, _ := run("cat /tmp/k"); !strings.Contains(text, "kept\n") {
				t.Errorf("the session did not keep /tmp: %q", text)
			}
		} else if text, _ := run("cat /tmp/k ~/hc/f"); !strings.Contains(text, "kept\ncached\n") {
			t.Errorf("the session did not keep /tmp and the cache layer: %q", text)
		}
		if text, isErr := run("exit 4"); isErr || !strings.Contains(text, "exit status: 4") {
			t.Errorf("exit 4: isError=%v %q", isErr, text)
		}
		pid := cmd.Process.Pid
		if err := cs.Close(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Logf("close: %v", err)
		}
		if _, err := os.Stat(filepath.Join(c.dir, "../hostcache/f")); err == nil {
			t.Error("a write to the cache reached the host")
		}
		if e.image != "" {
			if left := objects(t, e.name, pid); len(left) > 0 {
				t.Errorf("the server left %v behind", left)
			}
		}
	})
}

// TestMCPInspector lists and calls the tool with the official MCP inspector
// CLI (installed by make deps).
func TestMCPInspector(t *testing.T) {
	bin := os.Getenv("SANDBASH_INSPECTOR")
	if bin == "" {
		home, _ := os.UserHomeDir()
		bin = filepath.Join(home, ".cache/sandbash/inspector/node_modules/.bin/mcp-inspector")
	}
	if _, err := os.Stat(bin); err != nil {
		backendtest.Unavailable(t, "inspector", err)
	}
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		base := append([]string{"--cli", binary, "mcp"}, e.args()...)
		inspect := func(args ...string) map[string]any {
			cmd := exec.Command(bin, append(base, args...)...)
			cmd.Dir, cmd.Env = c.dir, c.env
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("inspector %v: %v\n%s", args, err, out)
			}
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("inspector %v printed no JSON: %v\n%s", args, err, out)
			}
			return v
		}
		list := inspect("--method", "tools/list")
		if tools, _ := list["tools"].([]any); len(tools) != 1 || tools[0].(map[string]any)["name"] != "bash" {
			t.Errorf("tools/list: %v", list)
		}
		res := inspect("--method", "tools/call", "--tool-name", "bash", "--tool-arg", "command=echo from the inspector; exit 2")
		b, _ := json.Marshal(res)
		if !strings.Contains(string(b), `from the inspector\nexit status: 2`) {
			t.Errorf("tools/call: %s", b)
		}
	})
}

// TestCLISessions: /tmp, HOME and caches persist between separate `run
// --session` processes, concurrent runs in one session both complete, and
// close removes it.
func TestCLISessions(t *testing.T) {
	forAgentBackends(t, true, func(t *testing.T, e engine, c *cli) {
		host := filepath.Join(c.dir, "../hostcache")
		os.MkdirAll(host, 0o755)
		cache, hc := []string{"--cache-dir", host + ":/home/sandbash/hc"}, "~/hc/c"
		if e.name == kubernetes.name {
			refusesCaches(t, c, append(append([]string{"session", "open"}, e.args()...), cache...))
			cache, hc = nil, "~/c" // HOME persists all the same
		}
		out, errOut, code := c.run(append(append(append([]string{"session", "open"}, e.args()...), cache...), "--env", "SB_X=1")...)
		id := strings.TrimSpace(out)
		if code != 0 || len(id) != 12 {
			t.Fatalf("session open: exit %d, %q %s", code, out, errOut)
		}
		if _, errOut, code := c.run("run", "--session", id, "--", "echo t > /tmp/t; echo h > ~/h; echo c > "+hc); code != 0 {
			t.Fatalf("first run: exit %d %s", code, errOut)
		}
		if out, errOut, code := c.run("run", "--session", id, "--", "cat /tmp/t ~/h "+hc+"; echo $SB_X"); code != 0 || out != "t\nh\nc\n1\n" {
			t.Errorf("second run: exit %d %q %s", code, out, errOut)
		}
		var wg sync.WaitGroup
		codes := make([]int, 2)
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, codes[i] = c.run("run", "--session", id, "--", "echo $$ >> /tmp/both; sleep 0.5")
			}()
		}
		wg.Wait()
		if out, _, _ := c.run("run", "--session", id, "--", "wc -l < /tmp/both"); codes[0] != 0 || codes[1] != 0 || strings.TrimSpace(out) != "2" {
			t.Errorf("concurrent runs: exit %v, %q lines", codes, out)
		}
		if _, errOut, code := c.run("run", "--session", id, "--network", "on", "--", "true"); code != 125 || !strings.Contains(errOut, "keeps the flags") {
			t.Errorf("a flag with --session: exit %d %s", code, errOut)
		}
		if out, _, _ := c.run("session", "list"); !strings.Contains(out, id) {
			t.Errorf("session list lacks %s:\n%s", id, out)
		}
		if _, errOut, code := c.run("session", "close", id); code != 0 {
			t.Fatalf("session close: %d %s", code, errOut)
		}
		if _, errOut, code := c.run("run", "--session", id, "--", "true"); code != 125 || !strings.Contains(errOut, "no session") {
			t.Errorf("run in a closed session: exit %d %s", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(host, "c")); err == nil {
			t.Error("a write to the cache reached the host")
		}
	})
}

// refusesCaches checks that sandbash args (with caches, on Kubernetes)
// refuses them as Kubernetes does by design, with exit status 125 and the
// reason, running nothing.
func refusesCaches(t *testing.T, c *cli, args []string) {
	t.Helper()
	out, errOut, code := c.run(args...)
	if code != 125 || !strings.Contains(errOut, "caches are not supported on Kubernetes") || !strings.Contains(errOut, "without caches") {
		t.Errorf("sandbash %s: exit %d, stdout %q, stderr %q; want 125 and why caches are refused", strings.Join(args, " "), code, out, errOut)
	}
}

// mcpHTTP is a running `sandbash mcp --http`.
type mcpHTTP struct {
	cmd       *exec.Cmd
	url       string
	tokenFile string // the file of the token it made, if it made one
	mu        sync.Mutex
	stderr    strings.Builder
}

// startMCPHTTP starts `sandbash mcp --backend bwrap --http 127.0.0.1:0
// args...` in c with extra environment env, and stops it when the test
// ends.
func startMCPHTTP(t *testing.T, c *cli, env []string, args ...string) *mcpHTTP {
	t.Helper()
	s := &mcpHTTP{cmd: c.cmd(append([]string{"mcp", "--backend", "bwrap", "--http", "127.0.0.1:0"}, args...)...)}
	s.cmd.Env = append(append([]string{}, c.env...), env...)
	pipe, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.cmd.Wait()
	})
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.stderr.WriteString(line + "\n")
			if p, ok := strings.CutPrefix(line, "sandbash mcp: token file: "); ok {
				s.tokenFile = p
			}
			if u, ok := strings.CutPrefix(line, "sandbash mcp: serving streamable HTTP on "); ok {
				s.url = u
				close(ready)
			}
			s.mu.Unlock()
		}
		if s.url == "" {
			close(ready)
		}
	}()
	<-ready
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.url == "" {
		t.Fatalf("sandbash mcp --http did not start:\n%s", s.stderr.String())
	}
	return s
}

// connect attaches the official Go SDK client, sending token.
func (s *mcpHTTP) connect(t *testing.T, token string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	if rt == nil {
		rt = http.DefaultTransport
	}
	hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return rt.RoundTrip(r)
	})}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connecting to %s with the token: %v", s.url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func callTool(t *testing.T, cs *mcp.ClientSession, command string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil {
		t.Fatalf("tools/call %q: %v", command, err)
	}
	return toolText(t, res)
}

// localUser is another local account: as root a throw-away one, removed
// (with its home) when the test ends; as a user the one root made
// beforehand ($SANDBASH_TEST_OTHER_USER).
type localUser struct {
	name     string
	uid, gid uint32
	sudo     bool // become it with sudo (not root ourselves)
}

func newLocalUser(t *testing.T) *localUser {
	t.Helper()
	if os.Getuid() != 0 {
		return otherLocalUser(t)
	}
	b := make([]byte, 5)
	rand.Read(b)
	name := "sbt" + hex.EncodeToString(b)
	var out []byte
	var err error
	for range 20 { // useradd fails while another process holds /etc/passwd's lock
		if out, err = exec.Command("useradd", "--create-home", "--shell", "/bin/sh", name).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		for range 20 {
			out, err := exec.Command("userdel", "--remove", name).CombinedOutput()
			if err == nil {
				return
			}
			if !strings.Contains(string(out), "lock") {
				t.Errorf("userdel %s: %v\n%s", name, err, out)
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &localUser{name: name, uid: uint32(uid), gid: uint32(gid)}
}

// OtherUserEnv names, for a test run as a user, the other local user it
// may become with sudo (make test-user sets it; scripts/deps.sh user makes
// it): only root can make one.
const OtherUserEnv = "SANDBASH_TEST_OTHER_USER"

// otherLocalUser is newLocalUser for a test run as a user: the one root
// made beforehand, become with sudo.
func otherLocalUser(t *testing.T) *localUser {
	t.Helper()
	name := os.Getenv(OtherUserEnv)
	if name == "" {
		t.Fatalf("as a user, this test needs another local user it may become with sudo: set %s to its name (make test-user does; scripts/deps.sh user makes it)", OtherUserEnv)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if uid == os.Getuid() {
		t.Fatalf("%s=%s is this test's own user", OtherUserEnv, name)
	}
	lu := &localUser{name: name, uid: uint32(uid), gid: uint32(gid), sudo: true}
	if out, err := lu.run("id", "-u"); err != nil || strings.TrimSpace(out) != u.Uid {
		t.Fatalf("becoming %s with sudo: %v %q; scripts/deps.sh user lets the test user do so", name, err, out)
	}
	return lu
}

// run runs argv as the user, with no supplementary groups (with sudo: the
// user's own), and returns its combined output.
func (u *localUser) run(argv ...string) (string, error) {
	env := []string{"PATH=/usr/bin:/bin", "HOME=/home/" + u.name, "LANG=C"}
	if u.sudo {
		argv = append(append([]string{"sudo", "-n", "-u", u.name, "--", "env", "-i"}, env...), argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = env
	if !u.sudo {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// initialize is an MCP initialize request, as a client opens a connection
// with.
const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`

// curlStatus POSTs an initialize request to url as u with curl, with the
// extra header, and returns the HTTP status.
func (u *localUser) curlStatus(t *testing.T, url, header string) string {
	t.Helper()
	argv := []string{"curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST",
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream", "--data", initialize}
	if header != "" {
		argv = append(argv, "-H", header)
	}
	out, err := u.run(append(argv, url)...)
	if err != nil {
		t.Fatalf("curl as %s: %v\n%s", u.name, err, out)
	}
	return strings.TrimSpace(out)
}

// TestMCPHTTPOtherLocalUser: another local user reaches the loopback port,
// but without the token it gets 401 and nothing runs, and it cannot read
// the token: not from the token file, the state directory, the server's
// environment or any process's command line.
func TestMCPHTTPOtherLocalUser(t *testing.T) {
	c := newCLI(t)
	mallory := newLocalUser(t)
	srv := startMCPHTTP(t, c, nil)

	for _, header := range []string{"", "Authorization: Bearer " + strings.Repeat("A", 52), "Authorization: Basic cm9vdDpyb290"} {
		if code := mallory.curlStatus(t, srv.url, header); code != "401" {
			t.Errorf("another user with header %q: HTTP %s, want 401", header, code)
		}
	}
	if srv.tokenFile == "" {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		t.Fatalf("the server printed no token file:\n%s", srv.stderr.String())
	}
	for _, argv := range [][]string{
		{"cat", srv.tokenFile},
		{"ls", filepath.Dir(srv.tokenFile)},
		{"cat", fmt.Sprintf("/proc/%d/environ", srv.cmd.Process.Pid)},
	} {
		if out, err := mallory.run(argv...); err == nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("another user ran %v: %v\n%s", argv, err, out)
		}
	}
	fi, err := os.Stat(srv.tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
		t.Errorf("the token file: %v %v; want mode 0600, ours", fi.Mode(), err)
	}
	for _, dir := range []string{filepath.Dir(srv.tokenFile), filepath.Dir(filepath.Dir(srv.tokenFile))} {
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v; want mode 0700", dir, fi.Mode(), err)
		}
	}
	b, err := os.ReadFile(srv.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))

	// The owner, with the token, uses it.
	cs := srv.connect(t, token, nil)
	if text := callTool(t, cs, "echo over http; env"); !strings.Contains(text, "\nover http\n") || strings.Contains(text, token) {
		t.Errorf("the call: %q", text)
	}
	if pids := processesMentioning(token, "cmdline"); len(pids) > 0 {
		t.Errorf("the token is in the command line of processes %v", pids)
	}
	cs.Close()
	// The file goes with the server.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.cmd.Wait()
	if _, err := os.Stat(srv.tokenFile); !os.IsNotExist(err) {
		t.Errorf("the token file outlived the server: %v", err)
	}
}

// processesMentioning lists the processes whose /proc/PID/file holds s.
func processesMentioning(s, file string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/" + file); err == nil && strings.Contains(string(b), s) {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// descendants lists the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(fields) > 1 {
			ppid, _ := strconv.Atoi(fields[1])
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// TestMCPHTTPTokenFromEnvironment: a token given in SANDBASH_MCP_TOKEN is
// not passed on to any process sandbash starts, nor into calls.
func TestMCPHTTPTokenFromEnvironment(t *testing.T) {
	c := newCLI(t)
	b := make([]byte, 24)
	rand.Read(b)
	token := "env-" + hex.EncodeToString(b)
	srv := startMCPHTTP(t, c, []string{"SANDBASH_MCP_TOKEN=" + token})
	if srv.tokenFile != "" {
		t.Errorf("with a token given, the server made one in %s", srv.tokenFile)
	}
	cs := srv.connect(t, token, nil)
	// While a call runs, look at the environment of everything the server
	// started: bwrap and what runs inside.
	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{
			"command": "env; touch started; while [ ! -e release ]; do sleep 0.05; done"}})
		done <- result{res, err}
	}()
	defer os.WriteFile(filepath.Join(c.dir, "release"), nil, 0o644)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(c.dir, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	below := descendants(srv.cmd.Process.Pid)
	if len(below) == 0 {
		t.Error("found no process below the server while a call ran")
	}
	for _, pid := range below {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && strings.Contains(string(b), token) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			t.Errorf("process %d (%.60q) inherited the token", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
	os.WriteFile(filepath.Join(c.dir, "release"), nil, 0o644)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if text := toolText(t, r.res); strings.Contains(text, token) || !strings.Contains(text, "PATH=") {
		t.Errorf("the call's environment: %q", text)
	}
}

// refused runs sandbash with args, which should refuse to start: it returns
// the exit status and stderr, or fails the test if sandbash is still running
// after a minute (it started serving).
func refused(t *testing.T, c *cli, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir, cmd.Env = c.dir, c.env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("sandbash %v did not refuse to start: it served for a minute\n%s", args, errOut.String())
	}
	return errOut.String(), cmd.ProcessState.ExitCode()
}

// TestMCPHTTPTokenFlags: the token never on the command line, and a token
// file others can read is refused.
func TestMCPHTTPTokenFlags(t *testing.T) {
	c := newCLI(t)
	if errOut, code := refused(t, c, "mcp", "--backend", "bwrap", "--http", "127.0.0.1:0", "--token", "s3cret-s3cret-s3cret"); code != 125 || !strings.Contains(errOut, "--token-file") {
		t.Errorf("--token: exit %d, %s", code, errOut)
	}
	file := filepath.Join(c.dir, "../token")
	os.WriteFile(file, []byte("file-token-0123456789abcdef\n"), 0o644)
	if errOut, code := refused(t, c, "mcp", "--backend", "bwrap", "--http", "127.0.0.1:0", "--token-file", file); code != 125 || !strings.Contains(errOut, "chmod 600") {
		t.Errorf("a token file others can read: exit %d, %s", code, errOut)
	}
	if errOut, code := refused(t, c, "mcp", "--backend", "bwrap", "--token-file", file); code != 125 || !strings.Contains(errOut, "only for --http") {
		t.Errorf("--token-file without --http: exit %d, %s", code, errOut)
	}
	os.Chmod(file, 0o600)
	srv := startMCPHTTP(t, c, nil, "--token-file", file)
	if text := callTool(t, srv.connect(t, "file-token-0123456789abcdef", nil), "echo ok"); !strings.Contains(text, "\nok\n") {
		t.Errorf("with --token-file: %q", text)
	}
}

// TestMCPHTTPRemoteNeedsTLS: --allow-remote refuses to start without a
// certificate, and with one serves HTTPS only (tried on loopback).
func TestMCPHTTPRemoteNeedsTLS(t *testing.T) {
	c := newCLI(t)
	if errOut, code := refused(t, c, "mcp", "--backend", "bwrap", "--http", "127.0.0.1:0", "--allow-remote"); code != 125 || !strings.Contains(errOut, "--tls-cert") {
		t.Errorf("--allow-remote without TLS: exit %d, %s", code, errOut)
	}
	certFile, keyFile, pool := selfSigned(t, filepath.Join(c.dir, ".."))
	if errOut, code := refused(t, c, "mcp", "--backend", "bwrap", "--http", "127.0.0.1:0", "--allow-remote", "--tls-cert", certFile); code != 125 || !strings.Contains(errOut, "--tls-key") {
		t.Errorf("--tls-cert without --tls-key: exit %d, %s", code, errOut)
	}
	srv := startMCPHTTP(t, c, nil, "--allow-remote", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(srv.url, "https://") {
		t.Fatalf("--allow-remote serves %s", srv.url)
	}
	b, _ := os.ReadFile(srv.tokenFile)
	rt := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer rt.CloseIdleConnections()
	if text := callTool(t, srv.connect(t, strings.TrimSpace(string(b)), rt), "echo over https"); !strings.Contains(text, "\nover https\n") {
		t.Errorf("over HTTPS: %q", text)
	}
	// Plain HTTP gets nowhere.
	resp, err := http.Post("http://"+strings.TrimPrefix(srv.url, "https://"), "application/json", strings.NewReader(initialize))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the HTTPS server: %s", resp.Status)
		}
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key to
// dir, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sandbash test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestMCPInspectorHTTP connects the official MCP inspector to `sandbash mcp
// --http` the way its web UI does: through the inspector's proxy, with the
// bearer token in its Authorization header (the UI's "Authentication"
// setting), which the proxy passes on. Inspector 0.15.0's --cli mode cannot
// send headers, so TestMCPInspector uses stdio.
func TestMCPInspectorHTTP(t *testing.T) {
	home, _ := os.UserHomeDir()
	bin := filepath.Join(home, ".cache/sandbash/inspector/node_modules/.bin/mcp-inspector-server")
	if _, err := os.Stat(bin); err != nil {
		backendtest.Unavailable(t, "inspector", err)
	}
	c := newCLI(t)
	srv := startMCPHTTP(t, c, nil)
	b, err := os.ReadFile(srv.tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(b))

	// The proxy, on a free loopback port, with its own token.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	pb := make([]byte, 16)
	rand.Read(pb)
	proxyToken := hex.EncodeToString(pb)
	proxy := exec.Command(bin)
	proxy.Env = append(os.Environ(), "HOST=127.0.0.1", "PORT="+port, "MCP_PROXY_TOKEN="+proxyToken)
	out, err := proxy.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proxy.Stderr = proxy.Stdout
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Process.Kill(); proxy.Wait() })
	listening := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Proxy server listening") {
				listening <- true
			}
		}
		listening <- false
	}()
	if !<-listening {
		t.Fatal("the inspector's proxy did not start")
	}

	endpoint := "http://127.0.0.1:" + port + "/mcp?transportType=streamable-http&url=" + url.QueryEscape(srv.url)
	connect := func(header string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("X-MCP-Proxy-Auth", "Bearer "+proxyToken)
			if header != "" {
				r.Header.Set("Authorization", header)
			}
			return http.DefaultTransport.RoundTrip(r)
		})}
		return mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil).
			Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}, nil)
	}
	if cs, err := connect(""); err == nil {
		cs.Close()
		t.Error("the inspector connected without the bearer token")
	}
	cs, err := connect("Bearer " + token)
	if err != nil {
		t.Fatalf("the inspector with the bearer token: %v", err)
	}
	defer cs.Close()
	if text := callTool(t, cs, "echo through the inspector"); !strings.Contains(text, "\nthrough the inspector\n") {
		t.Errorf("tools/call through the inspector: %q", text)
	}
}
