package mcpserver_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend/backendtest"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/mcpserver"
)

// fixture runs a server on a real bwrap backend and records the sessions
// it opens.
type fixture struct {
	t        *testing.T
	srv      *mcpserver.Server
	ws       string
	mu       sync.Mutex
	sessions []*sandbash.Session
}

func newFixture(t *testing.T, confirm bool) *fixture {
	t.Helper()
	b, err := bwrap.New()
	if err != nil {
		backendtest.Unavailable(t, "bwrap", err)
	}
	ws := t.TempDir()
	f := &fixture{t: t, ws: ws}
	f.srv = mcpserver.New(mcpserver.Options{
		Open: func(ctx context.Context) (*sandbash.Session, error) {
			s, err := sandbash.Open(ctx, b, sandbash.Config{Workspace: ws})
			if err == nil {
				f.mu.Lock()
				f.sessions = append(f.sessions, s)
				f.mu.Unlock()
			}
			return s, err
		},
		Environment:   "Test sandbox.",
		Confirm:       confirm,
		ProgressEvery: 100 * time.Millisecond,
	})
	t.Cleanup(func() { f.srv.Close() })
	return f
}

// connect attaches a client over an in-memory transport.
func (f *fixture) connect(opts *mcp.ClientOptions) *mcp.ClientSession {
	f.t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	go f.srv.Run(context.Background(), st)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(context.Background(), ct, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t *testing.T, ctx context.Context, cs *mcp.ClientSession, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%v): %v", args, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String(), res.IsError
}

func TestBashTool(t *testing.T) {
	f := newFixture(t, false)
	cs := f.connect(nil)
	ctx := context.Background()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 || tools.Tools[0].Name != "bash" {
		t.Fatalf("tools: %+v, %v", tools, err)
	}
	desc := tools.Tools[0].Description
	for _, want := range []string{"cd", "stdin is closed", "Background processes", "15 KiB", "SIGTERM", "/tmp", "Test sandbox."} {
		if !strings.Contains(desc, want) {
			t.Errorf("the tool description does not tell %q", want)
		}
	}
	text, isErr := call(t, ctx, cs, map[string]any{"command": "echo hi; exit 3"})
	if isErr || text != "$ echo hi; exit 3\nhi\nexit status: 3\n" {
		t.Errorf("exit 3: isError=%v\n%s", isErr, text)
	}
	if text, isErr := call(t, ctx, cs, map[string]any{"command": "  "}); !isErr || !strings.Contains(text, "nothing ran") {
		t.Errorf("empty command: isError=%v %q", isErr, text)
	}
	if text, isErr := call(t, ctx, cs, map[string]any{"command": "true", "timeout": 601}); !isErr || !strings.Contains(text, "600") {
		t.Errorf("timeout 601: isError=%v %q", isErr, text)
	}
	if text, isErr := call(t, ctx, cs, map[string]any{"command": "sleep 30", "timeout": 1}); !isErr || !strings.Contains(text, "SIGTERM") {
		t.Errorf("timed out: isError=%v %q", isErr, text)
	}
	// The connection's session keeps /tmp; another connection has its own.
	call(t, ctx, cs, map[string]any{"command": "echo kept > /tmp/note"})
	if text, _ := call(t, ctx, cs, map[string]any{"command": "cat /tmp/note"}); !strings.Contains(text, "\nkept\n") {
		t.Errorf("/tmp across calls: %q", text)
	}
	other := f.connect(nil)
	if text, _ := call(t, ctx, other, map[string]any{"command": "cat /tmp/note 2>/dev/null || echo absent"}); !strings.Contains(text, "\nabsent\n") {
		t.Errorf("another connection sees the first one's /tmp: %q", text)
	}
}

func TestProgressAndCancellation(t *testing.T) {
	f := newFixture(t, false)
	var mu sync.Mutex
	var notes []string
	progressed := make(chan struct{}, 100)
	cs := f.connect(&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		mu.Lock()
		notes = append(notes, r.Params.Message)
		mu.Unlock()
		progressed <- struct{}{}
	}})
	params := &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "echo started; sleep 1; echo done"}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	mu.Lock()
	if len(notes) == 0 || !strings.Contains(notes[0], "running for") {
		t.Errorf("progress notifications: %q", notes)
	}
	mu.Unlock()

	// Cancelling the request ends the call's processes.
	mark := "sbmcp" + time.Now().Format("150405.000000")
	ctx, cancel := context.WithCancel(context.Background())
	params = &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "sh -c 'sleep 300; echo " + mark + "' & sleep 300"}}
	params.SetProgressToken("p2")
	errc := make(chan error, 1)
	go func() { _, err := cs.CallTool(ctx, params); errc <- err }()
	<-progressed // the call is running
	cancel()
	if err := <-errc; err == nil {
		t.Error("a cancelled call returned no error")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if !running(mark) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call's processes are still running")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func running(mark string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), mark) && e.Name() != "self" {
			return true
		}
	}
	return false
}

func TestConfirmByElicitation(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	var asked []string
	answer := "accept"
	cs := f.connect(&mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked = append(asked, r.Params.Message)
		return &mcp.ElicitResult{Action: answer}, nil
	}})
	if text, isErr := call(t, ctx, cs, map[string]any{"command": "echo approved\r"}); isErr || !strings.Contains(text, "\napproved\r\n") {
		t.Errorf("approved: isError=%v %q", isErr, text)
	}
	if len(asked) != 1 || !strings.Contains(asked[0], `$ echo approved\r`) {
		t.Errorf("the user was asked %q; want the escaped command", asked)
	}
	answer = "decline"
	if text, isErr := call(t, ctx, cs, map[string]any{"command": "touch ran"}); !isErr || !strings.Contains(text, "did not approve") {
		t.Errorf("declined: isError=%v %q", isErr, text)
	}
	// A client that cannot ask gets a refusal, not an unconfirmed run.
	plain := f.connect(nil)
	if text, isErr := call(t, ctx, plain, map[string]any{"command": "touch ran"}); !isErr || !strings.Contains(text, "elicitation") {
		t.Errorf("no elicitation: isError=%v %q", isErr, text)
	}
	answer = "accept"
	if text, _ := call(t, ctx, cs, map[string]any{"command": "test -e ran && echo RAN || echo clean"}); !strings.Contains(text, "\nclean\n") {
		t.Errorf("a refused command ran: %q", text)
	}
}

// mrtrClient can be asked (it supports elicitation) but leaves answering to
// the test: the test sends the approvals itself, as a client could.
var mrtrClient = &mcp.ClientOptions{
	ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept"}, nil
	},
	MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
}

// ask calls the tool with command in cs and returns the request state of
// the approval the server asks for.
func ask(t *testing.T, cs *mcp.ClientSession, command string) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": command}})
	if err != nil || res.InputRequests["confirm"] == nil || res.RequestState == "" {
		t.Fatalf("the server did not ask before %q: %v %+v", command, err, res)
	}
	return res.RequestState
}

// answer calls the tool with command in cs, presenting an accepted approval
// with request state.
func answer(t *testing.T, cs *mcp.ClientSession, command, state string) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Name:           "bash",
		Arguments:      map[string]any{"command": command},
		InputResponses: mcp.InputResponseMap{"confirm": &mcp.ElicitResult{Action: "accept"}},
		RequestState:   state,
	})
	if err != nil {
		t.Fatalf("CallTool(%q): %v", command, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return text.String(), res.IsError || res.InputRequests != nil
}

// ran counts the lines the test's commands appended to ran.log in the
// workspace: how many of them actually ran.
func (f *fixture) ran() int {
	b, _ := os.ReadFile(filepath.Join(f.ws, "ran.log"))
	return strings.Count(string(b), "\n")
}

// TestConfirmApprovalsCannotBeReplayed: an approval runs its command once,
// in the session it was given in, and only that command. Replaying it, in
// the same or another connection, or presenting it for another command, or
// a made-up one, runs nothing.
func TestConfirmApprovalsCannotBeReplayed(t *testing.T) {
	f := newFixture(t, true)
	a, b := f.connect(mrtrClient), f.connect(mrtrClient)
	const cmd = "echo once >> ran.log"

	state := ask(t, a, cmd)
	if text, refused := answer(t, a, cmd, state); refused || f.ran() != 1 {
		t.Fatalf("an approved command did not run: %q (%d runs)", text, f.ran())
	}
	if text, refused := answer(t, a, cmd, state); !refused || !strings.Contains(text, "nothing ran") {
		t.Errorf("replaying an approval in its session: refused=%v %q", refused, text)
	}
	if text, refused := answer(t, b, cmd, state); !refused || !strings.Contains(text, "nothing ran") {
		t.Errorf("replaying an approval in another session: refused=%v %q", refused, text)
	}
	if n := f.ran(); n != 1 {
		t.Fatalf("one approval ran the command %d times", n)
	}

	// An approval for one command does not run another; it stays good for
	// its own.
	state = ask(t, a, cmd)
	if text, refused := answer(t, a, "echo other >> ran.log", state); !refused || !strings.Contains(text, "nothing ran") {
		t.Errorf("an approval used for another command: refused=%v %q", refused, text)
	}
	// Nor one issued in another session.
	if text, refused := answer(t, b, cmd, state); !refused || !strings.Contains(text, "nothing ran") {
		t.Errorf("an approval used in another session: refused=%v %q", refused, text)
	}
	if text, refused := answer(t, a, cmd, state); refused {
		t.Errorf("the approval was spent by the refused attempts: %q", text)
	}
	// Nor made-up ones, or one altered by a byte.
	altered := []byte(state)
	altered[len(altered)/2] ^= 1
	for _, forged := range []string{"", "x", strings.Repeat("0", 64), string(altered)} {
		if text, refused := answer(t, a, cmd, forged); !refused || !strings.Contains(text, "nothing ran") {
			t.Errorf("a forged approval %q: refused=%v %q", forged, refused, text)
		}
	}
	if n := f.ran(); n != 2 {
		t.Errorf("two approvals ran the command %d times", n)
	}
}

// TestConfirmApprovalExpires: an approval presented after ApprovalTTL runs
// nothing.
func TestConfirmApprovalExpires(t *testing.T) {
	f := newFixture(t, true)
	now := time.Now()
	mcpserver.SetClock(f.srv, func() time.Time { return now })
	cs := f.connect(mrtrClient)
	const cmd = "echo late >> ran.log"
	state := ask(t, cs, cmd)
	now = now.Add(mcpserver.ApprovalTTL + time.Second)
	if text, refused := answer(t, cs, cmd, state); !refused || !strings.Contains(text, "expired") || f.ran() != 0 {
		t.Errorf("an expired approval: refused=%v %q (%d runs)", refused, text, f.ran())
	}
	state = ask(t, cs, cmd)
	if text, refused := answer(t, cs, cmd, state); refused || f.ran() != 1 {
		t.Errorf("a fresh approval: refused=%v %q", refused, text)
	}
}

func TestDisconnectClosesTheSession(t *testing.T) {
	f := newFixture(t, false)
	cs := f.connect(nil)
	call(t, context.Background(), cs, map[string]any{"command": "true"})
	f.mu.Lock()
	dir := f.sessions[0].Dir()
	f.mu.Unlock()
	cs.Close()
	waitGone(t, dir, "the session outlived its client")
}

// waitGone waits for dir to be removed, failing with msg if it is still
// there after 10 s.
func waitGone(t *testing.T, dir, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(dir); os.IsNotExist(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const testToken = "s3cret-s3cret-s3cret"

// serveHTTP serves f's server over HTTP on loopback with o (the test token
// unless o gives one).
func (f *fixture) serveHTTP(o mcpserver.HTTPOptions) *httptest.Server {
	f.t.Helper()
	if o.Token == "" {
		o.Token = testToken
	}
	h, err := f.srv.Handler(o)
	if err != nil {
		f.t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	f.t.Cleanup(hs.Close)
	return hs
}

func connectHTTP(url, token string) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearer{token}}
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
}

func TestHTTPNeedsTheToken(t *testing.T) {
	f := newFixture(t, false)
	if _, err := f.srv.Handler(mcpserver.HTTPOptions{}); err == nil {
		t.Error("Handler served HTTP without a token")
	}
	if _, err := f.srv.Handler(mcpserver.HTTPOptions{Token: "short"}); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("Handler took a 5-character token: %v", err)
	}
	hs := f.serveHTTP(mcpserver.HTTPOptions{})
	for _, wrong := range []string{"", "wrong", testToken + "x", testToken[:len(testToken)-1]} {
		if cs, err := connectHTTP(hs.URL, wrong); err == nil {
			cs.Close()
			t.Errorf("a client with the token %q connected", wrong)
		}
	}
	// Every request is checked, not only the one opening the connection.
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		req, _ := http.NewRequest(method, hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Mcp-Session-Id", "anything")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s without a token: %s", method, resp.Status)
		}
	}
	cs, err := connectHTTP(hs.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if text, isErr := call(t, context.Background(), cs, map[string]any{"command": "echo over http"}); isErr || !strings.Contains(text, "\nover http\n") {
		t.Errorf("isError=%v %q", isErr, text)
	}
}

// TestHTTPIdleSessionsClose: a connection that sends nothing for the idle
// timeout is closed, and its sandbox with it.
func TestHTTPIdleSessionsClose(t *testing.T) {
	f := newFixture(t, false)
	hs := f.serveHTTP(mcpserver.HTTPOptions{IdleTimeout: 200 * time.Millisecond})
	cs, err := connectHTTP(hs.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call(t, context.Background(), cs, map[string]any{"command": "true"})
	f.mu.Lock()
	dir := f.sessions[0].Dir()
	f.mu.Unlock()
	waitGone(t, dir, "the idle connection's session was not closed")
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}}); err == nil {
		t.Error("a call on a connection closed for idleness succeeded")
	}
}

// TestHTTPSessionCap: past the cap a new connection gets a JSON-RPC error
// that says what to do; closing one makes room.
func TestHTTPSessionCap(t *testing.T) {
	f := newFixture(t, false)
	hs := f.serveHTTP(mcpserver.HTTPOptions{MaxSessions: 2})
	var open []*mcp.ClientSession
	for range 2 {
		cs, err := connectHTTP(hs.URL, testToken)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		open = append(open, cs)
	}
	cs, err := connectHTTP(hs.URL, testToken)
	if err == nil {
		cs.Close()
		t.Fatal("a third connection opened with --max-sessions 2")
	}
	if !strings.Contains(err.Error(), "too many MCP connections") || !strings.Contains(err.Error(), "--max-sessions") {
		t.Errorf("the refusal does not say what happened and what to do: %v", err)
	}
	// The JSON-RPC error answers the request it refuses.
	req, _ := http.NewRequest(http.MethodPost, hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 400 || !strings.Contains(string(body), `"id":7`) || !strings.Contains(string(body), `"error"`) {
		t.Errorf("past the cap: %s %s", resp.Status, body)
	}
	open[0].Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs, err := connectHTTP(hs.URL, testToken)
		if err == nil {
			cs.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("closing a connection made no room: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}
