// Package mcpserver serves sandbash to AI agents over the Model Context
// Protocol: one tool, "bash", whose calls run in a sandbash session.
//
// Each MCP connection gets its own sandbash session, opened on its first
// call and closed when the client goes away or the server stops, so the
// session's /tmp, HOME and cache layers live exactly as long as the agent's
// conversation with the server. Long calls report progress; a client's
// cancellation ends the call's processes; with Confirm, every command is
// first put to the user through MCP elicitation (and refused when the
// client cannot ask); an approval runs its one command once, in the
// connection it was given in, within 5 minutes.
//
// Over HTTP (Handler) every request must carry the bearer token, idle
// connections are closed and the number of open ones is capped.
package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
)

// Options configure a Server.
type Options struct {
	// Open opens the sandbash session of a new connection. Required,
	// unless OpenSandbox is given.
	Open func(ctx context.Context) (*sandbash.Session, error)
	// OpenSandbox, if set, is used instead of Open: for what runs calls
	// without being one Session (the CLI's sessions, opened per call).
	OpenSandbox func(ctx context.Context) (Sandbox, error)
	// Review serves the "workspace" tool (review.go) as well: the
	// sandbox's workspace is in overlay mode.
	Review bool
	// Environment describes, for the tool's description, what the sandbox
	// has: workspace, backend, network policy, caches.
	Environment string
	// Confirm puts every command to the user before it runs.
	Confirm bool
	// Version is reported to clients.
	Version string
	// ProgressEvery is how often a running call reports progress (default
	// 2 s).
	ProgressEvery time.Duration
}

// Server is an MCP server exposing the bash tool.
type Server struct {
	opt Options
	mcp *mcp.Server
	key []byte           // binds approvals to their connection, nonce, expiry and command
	now func() time.Time // the clock approvals expire by

	approvals sync.Mutex
	issued    map[string]time.Time // nonces of approvals asked for and not yet used, to their expiry

	mu       sync.Mutex
	closed   bool
	sessions map[*mcp.ServerSession]*conn
	wg       sync.WaitGroup
}

// conn is one MCP connection's sandbash session, opened on first use.
type conn struct {
	id   string // random; approvals are bound to it
	once sync.Once
	s    Sandbox
	err  error
}

// New returns a server.
func New(opt Options) *Server {
	if opt.ProgressEvery <= 0 {
		opt.ProgressEvery = 2 * time.Second
	}
	s := &Server{opt: opt, sessions: map[*mcp.ServerSession]*conn{}, key: make([]byte, 32), now: time.Now, issued: map[string]time.Time{}}
	_, _ = rand.Read(s.key)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "sandbash", Title: "sandbash", Version: opt.Version}, &mcp.ServerOptions{
		Instructions: "Use the bash tool to run shell commands in a sandbox that sees the project workspace. " + opt.Environment,
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "bash",
		Title:       "Run a shell command in the sandbox",
		Description: toolDescription(opt.Environment),
		InputSchema: inputSchema(),
	}, s.bash)
	if opt.Review {
		s.addWorkspaceTool()
	}
	return s
}

// Input is the bash tool's input.
type Input struct {
	Command     string `json:"command" jsonschema:"the command to run with bash -c"`
	Description string `json:"description,omitempty" jsonschema:"a short label for what the command does, shown to the user"`
	Timeout     int    `json:"timeout,omitempty"` // described by inputSchema
}

// seconds renders a duration as a whole number of seconds.
func seconds(d time.Duration) int { return int(d / time.Second) }

// inputSchema is Input's schema, with the timeout's description built from
// the root package's limits (sandbash.CheckRequest enforces them).
func inputSchema() *jsonschema.Schema {
	schema, err := jsonschema.For[Input](nil)
	if err != nil {
		panic("mcpserver: the bash tool's input schema: " + err.Error())
	}
	schema.Properties["timeout"].Description = fmt.Sprintf("seconds before the command is stopped (SIGTERM, then SIGKILL %d s later); default %d, at most %d",
		seconds(sandbash.DefaultKillGrace), seconds(sandbash.DefaultTimeout), seconds(sandbash.MaxTimeout))
	return schema
}

func toolDescription(env string) string {
	return strings.TrimSpace(`Runs a shell command with bash -c in a sandbox and returns its output and exit status.

How the sandbox behaves:
- Every call starts a fresh shell at the workspace root: cd, variables and functions do not carry over to the next call. Chain steps with && in one command.
- stdin is closed: commands that wait for input get end of file. Pass input with flags, files or here-documents.
- Background processes (cmd &, nohup, setsid) are ended when the call's main command exits: nothing keeps running between calls.
- stdout and stderr come back as one stream, in order. Long output keeps its first and last 15 KiB with a marker saying how much was left out; the whole output is saved to a file whose path the result gives (read parts of it with head, tail or grep).
- The timeout defaults to ` + fmt.Sprintf("%d s (at most %d): the command then gets SIGTERM, and SIGKILL %d s later", seconds(sandbash.DefaultTimeout), seconds(sandbash.MaxTimeout), seconds(sandbash.DefaultKillGrace)) + `; what it printed until then is returned.
- /tmp and HOME are private to this session: they keep their files across calls and are discarded when the session ends.
- The host outside the workspace and the paths configured for the session is not visible.
` + env)
}

func errorResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// bash is the tool handler.
func (s *Server) bash(ctx context.Context, req *mcp.CallToolRequest, in Input) (*mcp.CallToolResult, any, error) {
	r := sandbash.Request{Command: in.Command, Timeout: time.Duration(in.Timeout) * time.Second}
	if err := sandbash.CheckRequest(r, 0); err != nil {
		return errorResult("refused, nothing ran: %v", err), nil, nil
	}
	c, err := s.conn(ctx, req.Session)
	if err != nil {
		return errorResult("the sandbox could not be opened, nothing ran: %v", err), nil, nil
	}
	sess := c.s
	if s.opt.Confirm {
		if res := s.confirm(req, c.id, in); res != nil {
			return res, nil, nil
		}
	}
	var written atomic.Int64
	r.Live = counter{&written}
	stop := s.progress(ctx, req, &written)
	res, err := sess.Run(ctx, r)
	stop()
	if res == nil {
		return errorResult("refused, nothing ran: %v", err), nil, nil
	}
	text := res.Observation()
	if err != nil {
		text += "error: " + err.Error() + "\n"
	}
	return &mcp.CallToolResult{
		IsError: err != nil || res.TimedOut || res.OOMKilled,
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
	}, nil, nil
}

// confirm puts the command to the user. It returns the result to send
// instead of running: an input request the first time (the client asks the
// user and calls again with the answer; for clients on older protocol
// versions the SDK asks through elicitation itself), or a refusal. It
// returns nil once the user approved this very command: the request state
// carries a one-time nonce, an expiry and a MAC that binds them to the
// connection and the command's text, so an approval cannot be replayed, moved
// to another connection or command, used late, or made up.
func (s *Server) confirm(req *mcp.CallToolRequest, connID string, in Input) *mcp.CallToolResult {
	ip := req.Session.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return errorResult("refused, nothing ran: this server asks the user before every command (--confirm), and this MCP client cannot ask (it does not support elicitation). Use a client that does, or run the server without --confirm.")
	}
	if resp, ok := req.Params.InputResponses["confirm"]; ok {
		if err := s.redeem(req.Params.RequestState, connID, in.Command); err != nil {
			return errorResult("refused, nothing ran: %v. Call the tool again without an answer to be asked anew.", err)
		}
		if er, isElicit := resp.(*mcp.ElicitResult); !isElicit || er.Action != "accept" {
			action := "no answer"
			if isElicit {
				action = er.Action
			}
			return errorResult("refused, nothing ran: the user did not approve the command (%s)", action)
		}
		return nil
	}
	msg := "Run this command in the sandbox?\n\n$ " + sandbash.EscapeCommand(in.Command)
	if in.Description != "" {
		msg = sandbash.EscapeCommand(in.Description) + "\n\n" + msg
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
			Message:         msg,
			RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{}},
		}},
		RequestState: s.issue(connID, in.Command),
	}
}

const (
	// ApprovalTTL is how long the user's answer to a confirmation stays
	// good.
	ApprovalTTL = 5 * time.Minute
	// maxIssued bounds the approvals asked for and not yet answered; past
	// it the oldest is forgotten (and so refused).
	maxIssued = 1024
	stateTag  = "sbc1"
)

// mac is the MAC of an approval: its connection, nonce, expiry and command.
func (s *Server) mac(connID string, nonce []byte, exp int64, command string) []byte {
	m := hmac.New(sha256.New, s.key)
	cmd := sha256.Sum256([]byte(command))
	var e [8]byte
	binary.BigEndian.PutUint64(e[:], uint64(exp))
	id := sha256.Sum256([]byte(connID))
	for _, part := range [][]byte{[]byte(stateTag), id[:], nonce, e[:], cmd[:]} { // fixed sizes: unambiguous
		m.Write(part)
	}
	return m.Sum(nil)
}

// issue returns the request state of a new approval of command in the
// connection connID, and remembers its nonce until it is used or expires.
func (s *Server) issue(connID, command string) string {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	now := s.now()
	exp := now.Add(ApprovalTTL).Unix()
	s.approvals.Lock()
	for n, e := range s.issued {
		if now.Unix() > e.Unix() {
			delete(s.issued, n)
		}
	}
	if len(s.issued) >= maxIssued {
		oldest, at := "", time.Time{}
		for n, e := range s.issued {
			if oldest == "" || e.Before(at) {
				oldest, at = n, e
			}
		}
		delete(s.issued, oldest)
	}
	s.issued[string(nonce)] = time.Unix(exp, 0)
	s.approvals.Unlock()
	b64 := base64.RawURLEncoding
	return strings.Join([]string{stateTag, b64.EncodeToString(nonce), strconv.FormatInt(exp, 10), b64.EncodeToString(s.mac(connID, nonce, exp, command))}, ".")
}

// redeem checks that state is an approval issued for command in the
// connection connID, not expired and not used before, and uses it up.
func (s *Server) redeem(state, connID, command string) error {
	invalid := errors.New("the approval presented was not given for this command in this connection")
	parts := strings.Split(state, ".")
	if len(parts) != 4 || parts[0] != stateTag {
		return invalid
	}
	b64 := base64.RawURLEncoding
	nonce, err1 := b64.DecodeString(parts[1])
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	mac, err3 := b64.DecodeString(parts[3])
	if err1 != nil || err2 != nil || err3 != nil || len(nonce) != 16 {
		return invalid
	}
	if !hmac.Equal(mac, s.mac(connID, nonce, exp, command)) {
		return invalid
	}
	if s.now().Unix() > exp {
		return fmt.Errorf("the approval expired (an answer is good for %v)", ApprovalTTL)
	}
	s.approvals.Lock()
	defer s.approvals.Unlock()
	if _, ok := s.issued[string(nonce)]; !ok {
		return errors.New("the approval presented was used already (each runs its command once)")
	}
	delete(s.issued, string(nonce))
	return nil
}

// progress reports a running call's progress until the returned func is
// called, if the client asked for progress.
func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest, written *atomic.Int64) func() {
	token := req.Params.GetProgressToken()
	if token == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(s.opt.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				elapsed := time.Since(start).Round(time.Second)
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: token,
					Progress:      elapsed.Seconds(),
					Message:       fmt.Sprintf("running for %v, %d bytes of output so far", elapsed, written.Load()),
				})
			}
		}
	}()
	return func() { close(done); <-finished }
}

type counter struct{ n *atomic.Int64 }

func (c counter) Write(p []byte) (int, error) { c.n.Add(int64(len(p))); return len(p), nil }

// conn returns the connection's state with its sandbash session, opening it
// on first use; it is closed when the connection ends.
func (s *Server) conn(ctx context.Context, ss *mcp.ServerSession) (*conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the server is shutting down")
	}
	c, ok := s.sessions[ss]
	if !ok {
		c = &conn{id: rand.Text()}
		s.sessions[ss] = c
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = ss.Wait()
			s.release(ss)
		}()
	}
	s.mu.Unlock()
	c.once.Do(func() { c.s, c.err = s.open(context.WithoutCancel(ctx)) })
	if c.err != nil {
		return nil, c.err
	}
	return c, nil
}

// release closes a connection's session.
func (s *Server) release(ss *mcp.ServerSession) {
	s.mu.Lock()
	c := s.sessions[ss]
	delete(s.sessions, ss)
	s.mu.Unlock()
	if c != nil {
		c.once.Do(func() { c.err = errors.New("closed") })
		if c.s != nil {
			_ = c.s.Close()
		}
	}
}

// Close closes every connection's session and waits for them. New calls
// are refused from then on.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	open := make([]*mcp.ServerSession, 0, len(s.sessions))
	for ss := range s.sessions {
		open = append(open, ss)
	}
	s.mu.Unlock()
	for _, ss := range open {
		_ = ss.Close()
		s.release(ss)
	}
	// Connections that never ran a command have no sandbox, but close them
	// too: nothing is served after Close.
	for ss := range s.mcp.Sessions() {
		_ = ss.Close()
	}
	s.wg.Wait()
	return nil
}

// Run serves one client over t (stdio: &mcp.StdioTransport{}) until it goes
// away or ctx ends, then closes its session.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	err := s.mcp.Run(ctx, t)
	_ = s.Close()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// HTTPOptions configure Handler.
type HTTPOptions struct {
	// Token is the bearer token every request must carry
	// ("Authorization: Bearer TOKEN"). Required: at least MinTokenLen
	// characters.
	Token string
	// IdleTimeout closes an MCP connection that has sent no request for
	// this long, and its sandbox session with it. Zero: never.
	IdleTimeout time.Duration
	// MaxSessions caps the MCP connections open at once; past it a new one
	// gets a JSON-RPC error. Zero: DefaultMaxSessions.
	MaxSessions int
}

const (
	// MinTokenLen is the shortest bearer token Handler accepts.
	MinTokenLen = 16
	// DefaultMaxSessions is HTTPOptions.MaxSessions' default.
	DefaultMaxSessions = 16
)

// CheckToken says what is wrong with a bearer token, if anything.
func CheckToken(token string) error {
	if len(token) < MinTokenLen {
		return fmt.Errorf("the bearer token is %d characters long; use at least %d random ones (for example: head -c 32 /dev/urandom | base64)", len(token), MinTokenLen)
	}
	for _, r := range token {
		if r <= ' ' || r > '~' {
			return errors.New("the bearer token has a space, a control or a non-ASCII character; use printable ASCII only (for example: head -c 32 /dev/urandom | base64)")
		}
	}
	return nil
}

// Handler serves clients over streamable HTTP. Every request must carry
// "Authorization: Bearer <token>" (compared in constant time); others get
// 401. Connections idle for o.IdleTimeout are closed, and at most
// o.MaxSessions are open at once.
func (s *Server) Handler(o HTTPOptions) (http.Handler, error) {
	if err := CheckToken(o.Token); err != nil {
		return nil, err
	}
	if o.IdleTimeout < 0 || o.MaxSessions < 0 {
		return nil, fmt.Errorf("idle timeout %v and session cap %d: give zero or more", o.IdleTimeout, o.MaxSessions)
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{SessionTimeout: o.IdleTimeout})
	want := sha256.Sum256([]byte(o.Token))
	lim := &limiter{srv: s, max: o.MaxSessions, live: map[string]bool{}}
	lim.changed = sync.NewCond(&lim.mu)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbash"`)
			writeRPCError(w, http.StatusUnauthorized, jsonrpc.ID{}, "sandbash: missing or wrong bearer token. Send the header \"Authorization: Bearer TOKEN\" with this server's token: the one in the file sandbash mcp printed at start, or the one it was given (--token-file, SANDBASH_MCP_TOKEN)")
			return
		}
		if r.Method != http.MethodPost || r.Header.Get("Mcp-Session-Id") != "" {
			h.ServeHTTP(w, r)
			return
		}
		// A POST without a session ID opens a connection.
		if open, ok := lim.reserve(); !ok {
			var id jsonrpc.ID
			if body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20)); err == nil {
				if req, ok := decodeRequest(body); ok {
					id = req.ID
				}
			}
			writeRPCError(w, http.StatusForbidden, id, fmt.Sprintf("sandbash: too many MCP connections: %d are open, the most this server allows (--max-sessions). Close one (idle ones close after the server's --idle-timeout), or restart the server with a larger --max-sessions", open))
			return
		}
		defer func() { lim.opened(w.Header().Get("Mcp-Session-Id")) }()
		h.ServeHTTP(w, r)
	}), nil
}

func decodeRequest(body []byte) (*jsonrpc.Request, bool) {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return nil, false
	}
	req, ok := msg.(*jsonrpc.Request)
	return req, ok && req.ID.IsValid()
}

// authorized reports whether r carries the bearer token whose SHA-256 is
// want. Comparing digests takes the same time whatever the length given.
func authorized(r *http.Request, want [sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// writeRPCError answers with a JSON-RPC error, which MCP clients show; id
// is null when the request's is not known.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, msg string) {
	var body []byte
	if id.IsValid() {
		body, _ = jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: -32000, Message: msg}})
	} else {
		body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32000, "message": msg}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// limiter counts the open HTTP connections (MCP sessions) and those being
// opened.
type limiter struct {
	srv     *Server
	max     int
	mu      sync.Mutex
	changed *sync.Cond      // on mu: a place was given back
	pending int             // POSTs that may open a session, in flight
	live    map[string]bool // IDs of open sessions
}

// reserve takes a place for a connection being opened, if there is one; it
// returns the number open.
func (l *limiter) reserve() (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// A POST in flight may open no session (clients first probe with
	// server/discover, which is refused, and may send the next request
	// before that handler returns): wait for those before refusing.
	for len(l.live)+l.pending >= l.max && l.pending > 0 {
		l.changed.Wait()
	}
	if n := len(l.live) + l.pending; n >= l.max {
		return n, false
	}
	l.pending++
	return 0, true
}

// opened gives back a place taken by reserve, and counts session id (if
// the POST opened one) until it closes.
func (l *limiter) opened(id string) {
	var ss *mcp.ServerSession
	if id != "" {
		for x := range l.srv.mcp.Sessions() {
			if x.ID() == id {
				ss = x
				break
			}
		}
	}
	l.mu.Lock()
	l.pending--
	if ss != nil {
		l.live[id] = true
	}
	l.changed.Broadcast()
	l.mu.Unlock()
	if ss != nil {
		go func() {
			_ = ss.Wait()
			l.mu.Lock()
			delete(l.live, id)
			l.changed.Broadcast()
			l.mu.Unlock()
		}()
	}
}
