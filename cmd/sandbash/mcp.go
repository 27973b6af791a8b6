package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/mcpserver"
)

// version is reported to MCP clients.
var version = "dev"

const mcpUsage = `Usage: sandbash mcp [run's session flags] [--http ADDR [--token T] [--allow-remote]]

Serves one tool, "bash", to an AI agent over the Model Context Protocol:
stdio by default, streamable HTTP with --http. Every MCP connection gets its
own sandbox session (its /tmp, HOME and caches live as long as the
connection); the session closes when the client goes away, and all close on
SIGINT or SIGTERM. With --confirm, each command is put to the user through
the client (MCP elicitation); clients that cannot ask get a refusal.

Add it to an agent's MCP configuration, for example:

  {"mcpServers": {"sandbash": {"command": "sandbash",
     "args": ["mcp", "--workspace", "/path/to/project", "--cache", "go"]}}}

Over HTTP the address must be on loopback unless --allow-remote is given,
and then a bearer token is required (--token, or SANDBASH_MCP_TOKEN).

Flags:
`

func mcpCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f sessionFlags
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mcpUsage); fs.PrintDefaults() }
	f.register(fs)
	addr := fs.String("http", "", "serve streamable HTTP on `ADDR` (e.g. 127.0.0.1:8931) instead of stdio")
	token := fs.String("token", os.Getenv("SANDBASH_MCP_TOKEN"), "bearer token HTTP clients must send (default $SANDBASH_MCP_TOKEN)")
	remote := fs.Bool("allow-remote", false, "allow --http on a non-loopback address (needs a token)")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "sandbash mcp: %v\n", err); return exitFailed }
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q: the agent sends the commands", fs.Arg(0)))
	}
	if err := f.parsed(fs); err != nil {
		return fail(err)
	}
	if *addr != "" {
		if err := checkAddr(*addr, *remote, *token); err != nil {
			return fail(err)
		}
	}
	p, err := f.prepare(ctx, stderr, false)
	if err != nil {
		return fail(err)
	}
	defer p.close()
	// Check the configuration once, now, rather than at the first call.
	s, err := sandbash.Open(ctx, p.b, p.cfg)
	if err != nil {
		return fail(err)
	}
	_ = s.Close()
	srv := mcpserver.New(mcpserver.Options{
		Open:        func(ctx context.Context) (*sandbash.Session, error) { return p.open(ctx, p.cfg) },
		Environment: describe(&f, p),
		Confirm:     p.confirm,
		Version:     version,
	})
	if *addr == "" {
		if err := srv.Run(ctx, &mcp.StdioTransport{}); err != nil {
			return fail(err)
		}
		return 0
	}
	l, err := net.Listen("tcp", *addr)
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: srv.Handler(*token), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	fmt.Fprintf(stderr, "sandbash mcp: serving streamable HTTP on http://%s/\n", l.Addr())
	err = hs.Serve(l)
	_ = srv.Close()
	if !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	return 0
}

// checkAddr allows loopback addresses, and others only when asked for and
// protected by a token.
func checkAddr(addr string, remote bool, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: give HOST:PORT, such as 127.0.0.1:8931", addr)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	switch {
	case loopback:
		return nil
	case !remote:
		return fmt.Errorf("--http %s is not a loopback address: anyone who reaches it could run commands. Use 127.0.0.1, or add --allow-remote with --token", addr)
	case token == "":
		return fmt.Errorf("--http %s with --allow-remote needs a bearer token: give --token or set SANDBASH_MCP_TOKEN", addr)
	}
	return nil
}

// describe tells the model what its sandbox has.
func describe(f *sessionFlags, p *prepared) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nThis sandbox: backend %s; workspace %s (read-write, the working directory of every call).", p.b.Name(), f.Workspace)
	if f.Network == "on" {
		b.WriteString(" Network: on.")
	} else {
		b.WriteString(" Network: none; downloads and other connections fail, so use what is already in the workspace and the caches.")
	}
	if len(f.Readable) > 0 {
		fmt.Fprintf(&b, " Read-only: %s.", strings.Join(f.Readable, ", "))
	}
	if len(f.Writable) > 0 {
		fmt.Fprintf(&b, " Also writable: %s.", strings.Join(f.Writable, ", "))
	}
	if len(p.cfg.Caches) > 0 {
		var names []string
		for _, c := range p.cfg.Caches {
			names = append(names, c.Target)
		}
		fmt.Fprintf(&b, " Dependency caches (the host's, copy-on-write: writes stay in this session): %s.", strings.Join(names, ", "))
	}
	return b.String()
}
