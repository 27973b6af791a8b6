// Package mcpserver serves sandbash to AI agents over the Model Context
// Protocol: one tool, "bash", whose calls run in a sandbash session.
//
// Each MCP connection gets its own sandbash session, opened on its first
// call and closed when the client goes away or the server stops, so the
// session's /tmp, HOME and cache layers live exactly as long as the agent's
// conversation with the server. Long calls report progress; a client's
// cancellation ends the call's processes; with Confirm, every command is
// first put to the user through MCP elicitation (and refused when the
// client cannot ask).
package mcpserver

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
)

// Options configure a Server.
type Options struct {
	// Open opens the sandbash session of a new connection. Required.
	Open func(ctx context.Context) (*sandbash.Session, error)
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
	key []byte // binds approvals to commands

	mu       sync.Mutex
	closed   bool
	sessions map[*mcp.ServerSession]*conn
	wg       sync.WaitGroup
}

// conn is one MCP connection's sandbash session, opened on first use.
type conn struct {
	once sync.Once
	s    *sandbash.Session
	err  error
}

// New returns a server.
func New(opt Options) *Server {
	if opt.ProgressEvery <= 0 {
		opt.ProgressEvery = 2 * time.Second
	}
	s := &Server{opt: opt, sessions: map[*mcp.ServerSession]*conn{}, key: make([]byte, 32)}
	_, _ = rand.Read(s.key)
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "sandbash", Title: "sandbash", Version: opt.Version}, &mcp.ServerOptions{
		Instructions: "Use the bash tool to run shell commands in a sandbox that sees the project workspace. " + opt.Environment,
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        "bash",
		Title:       "Run a shell command in the sandbox",
		Description: toolDescription(opt.Environment),
	}, s.bash)
	return s
}

// Input is the bash tool's input.
type Input struct {
	Command     string `json:"command" jsonschema:"the command to run with bash -c"`
	Description string `json:"description,omitempty" jsonschema:"a short label for what the command does, shown to the user"`
	Timeout     int    `json:"timeout,omitempty" jsonschema:"seconds before the command is stopped (SIGTERM, then SIGKILL 5 s later); default 120, at most 600"`
}

func toolDescription(env string) string {
	return strings.TrimSpace(`Runs a shell command with bash -c in a sandbox and returns its output and exit status.

How the sandbox behaves:
- Every call starts a fresh shell at the workspace root: cd, variables and functions do not carry over to the next call. Chain steps with && in one command.
- stdin is closed: commands that wait for input get end of file. Pass input with flags, files or here-documents.
- Background processes (cmd &, nohup, setsid) are ended when the call's main command exits: nothing keeps running between calls.
- stdout and stderr come back as one stream, in order. Long output keeps its first and last 15 KiB with a marker saying how much was left out; the whole output is saved to a file whose path the result gives (read parts of it with head, tail or grep).
- The timeout defaults to 120 s (at most 600): the command then gets SIGTERM, and SIGKILL 5 s later; what it printed until then is returned.
- /tmp and HOME are private to this session: they keep their files across calls and are discarded when the session ends.
- The host outside the workspace and the paths configured for the session is not visible.
` + env)
}

func errorResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// bash is the tool handler.
func (s *Server) bash(ctx context.Context, req *mcp.CallToolRequest, in Input) (*mcp.CallToolResult, any, error) {
	if in.Timeout < 0 || in.Timeout > 600 {
		return errorResult("timeout %d: give between 1 and 600 seconds, or leave it out for 120", in.Timeout), nil, nil
	}
	r := sandbash.Request{Command: in.Command, Timeout: time.Duration(in.Timeout) * time.Second}
	if err := sandbash.CheckRequest(r, 0); err != nil {
		return errorResult("refused, nothing ran: %v", err), nil, nil
	}
	sess, err := s.session(ctx, req.Session)
	if err != nil {
		return errorResult("the sandbox could not be opened, nothing ran: %v", err), nil, nil
	}
	if s.opt.Confirm {
		if res := s.confirm(req, in); res != nil {
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
// binds the answer to the command's text.
func (s *Server) confirm(req *mcp.CallToolRequest, in Input) *mcp.CallToolResult {
	ip := req.Session.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil {
		return errorResult("refused, nothing ran: this server asks the user before every command (--confirm), and this MCP client cannot ask (it does not support elicitation). Use a client that does, or run the server without --confirm.")
	}
	state := s.bind(in.Command)
	if resp, ok := req.Params.InputResponses["confirm"]; ok {
		er, isElicit := resp.(*mcp.ElicitResult)
		switch {
		case req.Params.RequestState != state:
			return errorResult("refused, nothing ran: the approval given was not for this command")
		case !isElicit || er.Action != "accept":
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
		RequestState: state,
	}
}

// bind returns a MAC of command under the server's key.
func (s *Server) bind(command string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(command))
	return hex.EncodeToString(m.Sum(nil))
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

// session returns the connection's sandbash session, opening it on first
// use; it is closed when the connection ends.
func (s *Server) session(ctx context.Context, ss *mcp.ServerSession) (*sandbash.Session, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errors.New("the server is shutting down")
	}
	c, ok := s.sessions[ss]
	if !ok {
		c = &conn{}
		s.sessions[ss] = c
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = ss.Wait()
			s.release(ss)
		}()
	}
	s.mu.Unlock()
	c.once.Do(func() { c.s, c.err = s.opt.Open(context.WithoutCancel(ctx)) })
	return c.s, c.err
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

// Handler serves clients over streamable HTTP. With a non-empty token,
// every request must carry "Authorization: Bearer <token>".
func (s *Server) Handler(token string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, nil)
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sandbash"`)
			http.Error(w, "sandbash: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
