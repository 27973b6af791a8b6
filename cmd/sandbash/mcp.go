package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/mcpserver"
)

// version is reported to MCP clients.
var version = "dev"

const mcpUsage = `Usage: sandbash mcp [run's session flags | --session ID] [--http ADDR [--token-file FILE] [--allow-remote --tls-cert FILE --tls-key FILE]]

Serves one tool, "bash", to an AI agent over the Model Context Protocol:
stdio by default, streamable HTTP with --http. Every MCP connection gets its
own sandbox session (its /tmp, HOME and caches live as long as the
connection); the session closes when the client goes away, and all close on
SIGINT or SIGTERM. With --confirm, each command is put to the user through
the client (MCP elicitation); clients that cannot ask get a refusal.

With --session ID, every connection's calls run in that CLI session (see
sandbash session open), one at a time, with its flags. A session opened
with --workspace-mode overlay keeps the agent's changes off the workspace:
a second tool, "workspace", lets the agent checkpoint, restore and diff
them (never apply), and you review and apply them with sandbash session
diff|apply ID. Overlay mode needs --session: a connection's own session
would take its changes with it when it ends.

Add it to an agent's MCP configuration, for example:

  {"mcpServers": {"sandbash": {"command": "sandbash",
     "args": ["mcp", "--workspace", "/path/to/project", "--cache", "go"]}}}

Over HTTP every request must carry "Authorization: Bearer TOKEN". The token
comes from --token-file, else $SANDBASH_MCP_TOKEN, else a new one is made at
every start and written to a file only you can read, in
$XDG_STATE_HOME/sandbash/mcp (its path is printed). The address must be on
loopback unless --allow-remote is given, and that serves HTTPS only
(--tls-cert, --tls-key). Idle connections are closed (--idle-timeout) and
at most --max-sessions are open at once.

Flags:
`

// tokenEnv names the variable a bearer token can come in. sandbash unsets it
// as soon as it has read it, so that no process it starts inherits it.
const tokenEnv = "SANDBASH_MCP_TOKEN"

// httpFlags are the flags that apply to --http only.
var httpFlags = []string{"token-file", "idle-timeout", "max-sessions", "allow-remote", "tls-cert", "tls-key"}

func mcpCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	envToken := os.Getenv(tokenEnv)
	os.Unsetenv(tokenEnv)
	var f sessionFlags
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, mcpUsage); fs.PrintDefaults() }
	f.register(fs)
	addr := fs.String("http", "", "serve streamable HTTP on `ADDR` (e.g. 127.0.0.1:8931) instead of stdio")
	tokenFile := fs.String("token-file", "", "read the bearer token HTTP clients must send from `FILE` (only you may be able to read it); default $"+tokenEnv+", else a new one in a file under $XDG_STATE_HOME/sandbash/mcp")
	removedToken := fs.String("token", "", "removed: a token on the command line is visible to every local user; use --token-file or $"+tokenEnv)
	idle := fs.Duration("idle-timeout", 30*time.Minute, "close an HTTP connection, and its sandbox session, after it sent no request for this long (0: never)")
	maxSessions := fs.Int("max-sessions", mcpserver.DefaultMaxSessions, "most HTTP connections open at once")
	remote := fs.Bool("allow-remote", false, "allow --http on a non-loopback address; serves HTTPS only, so it needs --tls-cert and --tls-key")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with the certificate (chain) in PEM `FILE`")
	tlsKey := fs.String("tls-key", "", "the private key of --tls-cert, PEM `FILE`")
	sessionID := fs.String("session", "", "run every connection's calls in the CLI session `ID` (sandbash session open), with its flags")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "sandbash mcp: %v\n", withFlags(err)); return exitFailed }
	if *removedToken != "" {
		return fail(fmt.Errorf("--token was removed: a token on the command line can be read by every local user (ps, /proc). Put it in a file only you can read and give --token-file FILE, or set %s", tokenEnv))
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q: the agent sends the commands", fs.Arg(0)))
	}
	var cli *cliSandbox
	if *sessionID != "" {
		st, err := mcpSession(fs, *sessionID)
		if err != nil {
			return fail(err)
		}
		f = st.Flags
		cli = &cliSandbox{id: st.ID, stderr: stderr}
	} else if err := f.parsed(fs); err != nil {
		return fail(err)
	} else if f.WorkspaceMode == string(sandbash.WorkspaceOverlay) {
		return fail(fmt.Errorf("--workspace-mode overlay needs --session: each connection's own session, and the agent's changes with it, would be discarded when the connection ends. Open a session (sandbash session open --workspace-mode overlay ...), serve it with sandbash mcp --session ID, and review and apply with sandbash session diff|apply ID"))
	}
	var token string
	var tlsConfig *tls.Config
	if *addr == "" {
		var given []string
		fs.Visit(func(fl *flag.Flag) {
			if slices.Contains(httpFlags, fl.Name) {
				given = append(given, "--"+fl.Name)
			}
		})
		if len(given) > 0 {
			return fail(fmt.Errorf("%s: only for --http; over stdio only the process that started sandbash can talk to it", strings.Join(given, ", ")))
		}
	} else {
		var err error
		if token, err = configuredToken(*tokenFile, envToken); err != nil {
			return fail(err)
		}
		if tlsConfig, err = loadTLS(*tlsCert, *tlsKey); err != nil {
			return fail(err)
		}
		if err := checkAddr(*addr, *remote, tlsConfig != nil); err != nil {
			return fail(err)
		}
		if *idle < 0 {
			return fail(fmt.Errorf("--idle-timeout %v: give a duration such as 30m, or 0 to keep idle connections open", *idle))
		}
		if *maxSessions < 1 {
			return fail(fmt.Errorf("--max-sessions %d: give 1 or more", *maxSessions))
		}
	}
	var p *prepared
	var err error
	if cli != nil {
		p, err = checkCLISession(ctx, cli.id, stderr)
	} else {
		p, err = f.prepare(ctx, stderr, false)
	}
	if err != nil {
		return fail(err)
	}
	defer p.close()
	// spare is a session opened ahead, taken by the first connection.
	var spare atomic.Pointer[sandbash.Session]
	if cli == nil {
		// Check the configuration once, now, rather than at the first
		// call (checkCLISession did for a CLI session). The session that
		// checked it serves the first connection: its warm container
		// starts now, not at the first call.
		s, err := p.open(ctx, p.cfg)
		if err != nil {
			return fail(err)
		}
		spare.Store(s)
		defer func() {
			if s := spare.Swap(nil); s != nil {
				_ = s.Close()
			}
		}()
	}
	opts := mcpserver.Options{
		Open: func(ctx context.Context) (*sandbash.Session, error) {
			if s := spare.Swap(nil); s != nil {
				return s, nil
			}
			return p.open(ctx, p.cfg)
		},
		Environment: describe(&f, p),
		Confirm:     p.confirm,
		Version:     version,
	}
	if cli != nil {
		opts.OpenSandbox = func(context.Context) (mcpserver.Sandbox, error) { return cli, nil }
		opts.Review = f.WorkspaceMode == string(sandbash.WorkspaceOverlay)
	}
	srv := mcpserver.New(opts)
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
	defer l.Close()
	if token == "" {
		var path string
		if path, token, err = newTokenFile(l.Addr()); err != nil {
			return fail(err)
		}
		defer os.Remove(path)
		fmt.Fprintf(stderr, "sandbash mcp: token file: %s\n", path)
		fmt.Fprintf(stderr, "sandbash mcp: clients must send \"Authorization: Bearer <the token in that file>\"; only you can read it, and it is new at every start\n")
	} else if *tokenFile != "" {
		fmt.Fprintf(stderr, "sandbash mcp: clients must send \"Authorization: Bearer <the token in %s>\"\n", *tokenFile)
	} else {
		fmt.Fprintf(stderr, "sandbash mcp: clients must send \"Authorization: Bearer $%s\"\n", tokenEnv)
	}
	h, err := srv.Handler(mcpserver.HTTPOptions{Token: token, IdleTimeout: *idle, MaxSessions: *maxSessions})
	if err != nil {
		return fail(err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConfig}
	go func() {
		<-ctx.Done()
		_ = srv.Close() // ends the sessions' streams, so that Shutdown need not wait for them
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if tlsConfig != nil {
		fmt.Fprintf(stderr, "sandbash mcp: serving streamable HTTP on https://%s/\n", l.Addr())
		err = hs.ServeTLS(l, "", "")
	} else {
		fmt.Fprintf(stderr, "sandbash mcp: serving streamable HTTP on http://%s/\n", l.Addr())
		err = hs.Serve(l)
	}
	_ = srv.Close()
	if !errors.Is(err, http.ErrServerClosed) {
		return fail(err)
	}
	return 0
}

// checkAddr allows loopback addresses, and others only when asked for and
// served over TLS.
func checkAddr(addr string, remote, tls bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: give HOST:PORT, such as 127.0.0.1:8931", addr)
	}
	loopback := host == "localhost"
	if ip := net.ParseIP(host); ip != nil {
		loopback = ip.IsLoopback()
	}
	switch {
	case remote && !tls:
		return fmt.Errorf("--allow-remote serves HTTPS only, so that the bearer token and the commands do not cross the network in clear: give --tls-cert FILE and --tls-key FILE")
	case !loopback && !remote:
		return fmt.Errorf("--http %s is not a loopback address: anyone who reaches it could try to run commands. Use 127.0.0.1, or add --allow-remote with --tls-cert and --tls-key", addr)
	}
	return nil
}

// loadTLS loads the certificate and key, if given (both or neither).
func loadTLS(cert, key string) (*tls.Config, error) {
	switch {
	case cert == "" && key == "":
		return nil, nil
	case cert == "" || key == "":
		return nil, errors.New("--tls-cert and --tls-key go together: give both, the certificate and its private key (PEM files)")
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s --tls-key %s: %v; give a PEM certificate and its PEM private key", cert, key, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// configuredToken returns the bearer token given by --token-file or the
// environment (env, "" if unset), or "" when there is none (one is made
// then).
func configuredToken(file, env string) (string, error) {
	switch {
	case file != "" && env != "":
		return "", fmt.Errorf("both --token-file and $%s give a bearer token: unset %s, or leave out --token-file", tokenEnv, tokenEnv)
	case file != "":
		return readTokenFile(file)
	case env != "":
		token := strings.TrimSpace(env)
		if err := mcpserver.CheckToken(token); err != nil {
			return "", fmt.Errorf("$%s: %v", tokenEnv, err)
		}
		return token, nil
	}
	return "", nil
}

// readTokenFile reads a bearer token from path, which other users must not
// be able to read.
func readTokenFile(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--token-file: %v", err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return "", fmt.Errorf("--token-file: %v", err)
	}
	if fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("--token-file %s: other users can read it (mode %v); make it yours alone: chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(fh, 4096))
	if err != nil {
		return "", fmt.Errorf("--token-file %s: %v", path, err)
	}
	token := strings.TrimSpace(string(b))
	if err := mcpserver.CheckToken(token); err != nil {
		return "", fmt.Errorf("--token-file %s: %v", path, err)
	}
	return token, nil
}

// newTokenFile makes a random bearer token and writes it to a new file that
// only this user can read, in $XDG_STATE_HOME/sandbash/mcp, named after the
// address served. It returns the file's path and the token.
func newTokenFile(addr net.Addr) (path, token string, err error) {
	base, err := stateBase()
	if err != nil {
		return "", "", err
	}
	dir := filepath.Join(base, "mcp")
	for _, d := range []string{base, dir} {
		if err := privateDir(d); err != nil {
			return "", "", err
		}
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(dir, host+"_"+port+".token")
	// A file left by a server that died: this address is ours now.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("removing the old token file: %v", err)
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", "", fmt.Errorf("creating the token file: %v", err)
	}
	token = rand.Text() + rand.Text() // 2 x 130 random bits
	_, err = fh.WriteString(token + "\n")
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return "", "", fmt.Errorf("writing the token file: %v", err)
	}
	return path, token, nil
}

// privateDir makes dir if it is missing, and makes sure that it is a
// directory of this user's that no one else can enter.
func privateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating %s for the MCP token: %v", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symlink?): remove it, and sandbash makes a private one", dir)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s belongs to another user: remove it, or set XDG_STATE_HOME to a directory of yours", dir)
	case fi.Mode().Perm()&0o077 != 0:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("%s can be entered by other users and cannot be made private (%v): chmod 700 %s", dir, err, dir)
		}
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
	if p.cfg.WorkspaceMode == sandbash.WorkspaceOverlay {
		b.WriteString(" The workspace is in overlay mode: what your commands change there stays in this session, visible to your later commands, until the user reviews and applies it; the workspace tool checkpoints, restores and diffs it.")
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
