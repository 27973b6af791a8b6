package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/internal/termsafe"
)

const runUsage = `Usage: sandbash run [flags] -- COMMAND

Runs 'bash -c COMMAND' once in a fresh sandbox and exits with its exit status.
Words after -- are joined with spaces; quote a whole script as one word.

What the command sees:
  - the workspace, read-write, at the same path as on the host; it starts there
  - --readable paths read-only, --writable paths read-write, at their host paths
  - its own /tmp and HOME (/home/sandbash), removed when sandbash exits
  - with --cache, the host's dependency caches copy-on-write: readable, and
    writes stay in the session (the host cache never changes); only the
    artifact directories, never gradle.properties, settings.xml, .npmrc,
    pip.conf, .netrc or cargo credentials
  - PATH, HOME, LANG=C.UTF-8, TERM=dumb, and only the --env variables you pass
  - no network unless --network on; never a Docker/Podman/containerd socket

Output modes:
  (default)      print the output live, as it comes
                 (on a terminal, escape sequences other than colour, and
                 control characters, are shown escaped, e.g. \x1b]52;...;
                 to a pipe or file the output is byte for byte)
  --observation  print what an agent should see: the escaped command, the
                 output (first and last 15 KiB, with a marker if truncated),
                 how it ended, and where the full output was saved
  --json         print one JSON object: backend, command, exit_code (null if
                 nothing ran), timed_out, oom_killed, duration_ms, output,
                 output_bytes, truncated, spill_path, error

Exit status: the command's own; 124 timed out; 125 sandbash failed or refused
(nothing ran, or the call could not finish); 130 interrupted.

Flags:
`

type runFlags struct {
	sessionFlags
	session     string
	timeout     int
	json        bool
	observation bool
}

// registerRun registers run's flags: a session's, and run's own.
func (f *runFlags) registerRun(fs *flag.FlagSet) {
	f.register(fs)
	fs.StringVar(&f.session, "session", "", "run in the CLI session `ID` (see sandbash session open) instead of a fresh one; its /tmp, HOME and caches persist, and its flags apply")
	fs.IntVar(&f.timeout, "timeout", int(sandbash.DefaultTimeout/time.Second), fmt.Sprintf("seconds before the command gets SIGTERM (then SIGKILL %d s later); %d to %d",
		sandbash.DefaultKillGrace/time.Second, sandbash.MinTimeout/time.Second, sandbash.MaxTimeout/time.Second))
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the live output")
	fs.BoolVar(&f.observation, "observation", false, "print the agent-facing observation text instead of the live output")
}

// prepareAhead starts, for a `sandbash run` in a fresh session, what Open
// will need and can be made ahead (sandbash.Prepare: as root, the user
// namespace that idmaps a root-owned workspace, which takes a process),
// first thing: the run waits for it otherwise. It reads the flags only to
// find the workspace; runCmd checks them, and a run that goes no further
// leaves nothing (the namespace is a descriptor of this process's).
func prepareAhead(args []string) {
	if len(args) == 0 || args[0] != "run" || os.Geteuid() != 0 {
		return
	}
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.registerRun(fs)
	if fs.Parse(args[1:]) != nil || f.session != "" {
		return
	}
	ws := f.Workspace
	if ws == "" {
		ws, _ = os.Getwd()
	}
	sandbash.Prepare(ws)
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	f.registerRun(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	rep := reporter{stdout: stdout, stderr: stderr, json: f.json}
	// On a terminal, the output cannot act on it (internal/termsafe); to a
	// pipe or a file it stays byte for byte. JSON escapes for itself.
	flushOut := func() {}
	if !f.json {
		// Live, a \r passes: it rewrites only the current line, and
		// progress bars use it. The observation is a record to read, so
		// there it shows.
		stdout, flushOut = termsafe.ForTerminal(stdout, termsafe.Options{KeepCR: !f.observation})
	}
	command := strings.Join(fs.Args(), " ")
	if fs.NArg() == 0 {
		return rep.fail(command, "", fmt.Errorf("no command given: sandbash run [flags] -- COMMAND (see sandbash run --help)"))
	}
	if f.json && f.observation {
		return rep.fail(command, "", errors.New("--json and --observation are exclusive: pick one"))
	}
	if f.timeout == 0 {
		// A Request takes 0 for the default, which the flag's default
		// already is: given on the command line, 0 is a mistake. The range
		// itself is CheckRequest's.
		return rep.fail(command, "", fmt.Errorf("--timeout 0: give between %d and %d seconds: %w", sandbash.MinTimeout/time.Second, sandbash.MaxTimeout/time.Second, sandbash.ErrTimeoutRange))
	}
	req := sandbash.Request{Command: command, Timeout: time.Duration(f.timeout) * time.Second}
	if err := sandbash.CheckRequest(req, 0); err != nil {
		return rep.fail(command, "", err)
	}
	var (
		p       *prepared
		release = func() {}
		err     error
	)
	if f.session != "" {
		p, release, err = openCLISession(ctx, f.session, fs, stderr)
	} else if err = f.parsed(fs); err == nil {
		p, err = f.prepare(ctx, stderr, true)
	}
	if err != nil {
		return rep.fail(command, f.Backend, err)
	}
	defer release()
	defer p.close()
	cfg := p.cfg
	if f.session == "" && cfg.WorkspaceMode == sandbash.WorkspaceOverlay {
		fmt.Fprintln(stderr, "sandbash: --workspace-mode overlay without --session: what the command changes in the workspace is discarded when it ends. To review and apply changes, open a session (sandbash session open --workspace-mode overlay) and run in it")
	}
	if p.confirm {
		cfg.Confirm = terminalConfirmer{}
	}
	// Spill files must outlive this process when their path is printed.
	if (f.json || f.observation) && cfg.Dir == "" {
		dir, err := outputDir()
		if err != nil {
			return rep.fail(command, p.b.Name(), err)
		}
		cfg.OutputDir = dir
	}
	s, err := sandbash.Open(ctx, p.b, cfg)
	if err != nil {
		return rep.fail(command, p.b.Name(), err)
	}
	if !f.json && !f.observation {
		req.Live = stdout
	}
	p.reap() // alongside the call
	res, runErr := s.Run(ctx, req)
	flushOut() // before anything else is printed: held bytes, colour reset
	if err := s.Close(); err != nil {
		fmt.Fprintf(stderr, "sandbash: closing the session: %v\n", err)
	}
	switch {
	case res == nil:
		return rep.fail(command, p.b.Name(), runErr)
	case f.json:
		rep.printJSON(res, runErr)
	case f.observation:
		fmt.Fprint(stdout, res.Observation())
		flushOut()
	default:
		if res.TimedOut || res.OOMKilled || res.Canceled {
			fmt.Fprintf(stderr, "sandbash: %s\n", res.Status())
		}
		if len(res.EgressDenied) > 0 {
			more := ""
			if res.EgressDeniedOmitted > 0 {
				more = fmt.Sprintf(", and %d more denials not listed", res.EgressDeniedOmitted)
			}
			fmt.Fprintf(stderr, "sandbash: egress denied: %s%s (allow a destination with --allow)\n", strings.Join(res.EgressDenied, ", "), more)
		}
	}
	switch {
	case res.Canceled:
		return 130
	case runErr != nil:
		if !f.json {
			fmt.Fprintln(stderr, message(runErr))
		}
		return exitFailed
	case res.TimedOut:
		return exitTimedOut
	}
	return res.ExitCode
}

// stateBase is $XDG_STATE_HOME/sandbash, or ~/.local/state/sandbash.
func stateBase() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no place for sandbash's state: set XDG_STATE_HOME or HOME (%v)", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "sandbash"), nil
}

// outputDir is where spill files of one-shot runs are kept.
func outputDir() (string, error) {
	base, err := stateBase()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(base, "output")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s for spill files: %w", dir, err)
	}
	return dir, nil
}

// reporter prints results and failures in the chosen format.
type reporter struct {
	stdout, stderr io.Writer
	json           bool
}

type jsonResult struct {
	Backend     string `json:"backend"`
	Command     string `json:"command"`
	ExitCode    *int   `json:"exit_code"`
	TimedOut    bool   `json:"timed_out"`
	OOMKilled   bool   `json:"oom_killed"`
	DurationMS  int64  `json:"duration_ms"`
	Output      string `json:"output"`
	OutputBytes int64  `json:"output_bytes"`
	Truncated   bool   `json:"truncated"`
	SpillPath   string `json:"spill_path"`
	// EgressDenied lists the destinations the egress rules denied.
	EgressDenied []string `json:"egress_denied,omitempty"`
	// EgressDeniedOmitted counts the denials egress_denied leaves out
	// because it was full.
	EgressDeniedOmitted int    `json:"egress_denied_omitted,omitempty"`
	Error               string `json:"error"`
}

// fail reports that nothing ran (or sandbash could not go on) and returns
// exit status 125.
func (r reporter) fail(command, backendName string, err error) int {
	err = withFlags(err)
	if r.json {
		r.writeJSON(jsonResult{Backend: backendName, Command: command, Error: err.Error()})
	} else {
		fmt.Fprintln(r.stderr, message(err))
	}
	return exitFailed
}

// message is an error as a line for stderr, said to come from sandbash
// once.
func message(err error) string {
	if s := err.Error(); strings.HasPrefix(s, "sandbash: ") {
		return s
	}
	return "sandbash: " + err.Error()
}

func (r reporter) printJSON(res *sandbash.Result, runErr error) {
	code := res.ExitCode
	j := jsonResult{
		Backend: res.Backend, Command: res.Command, ExitCode: &code,
		TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, DurationMS: res.Duration.Milliseconds(),
		Output: res.Output, OutputBytes: res.OutputBytes, Truncated: res.Truncated, SpillPath: res.SpillPath,
		EgressDenied: res.EgressDenied, EgressDeniedOmitted: res.EgressDeniedOmitted,
	}
	if runErr != nil {
		j.Error = runErr.Error()
	}
	r.writeJSON(j)
}

func (r reporter) writeJSON(j jsonResult) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(j)
	_, _ = r.stdout.Write(termsafe.EscapeJSON(b.Bytes()))
}
