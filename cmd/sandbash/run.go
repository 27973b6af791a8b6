package main

import (
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

	"github.com/docker/go-units"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/container"
	"github.com/sandbash/sandbash/overlay"
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

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

type runFlags struct {
	backend     string
	workspace   string
	image       string
	timeout     int
	network     string
	readable    stringList
	writable    stringList
	env         stringList
	confirm     bool
	json        bool
	observation bool
	memory      string
	cpus        float64
	pids        int64
	caches      stringList
	cacheDirs   stringList
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.backend, "backend", "auto", "sandbox backend: auto, bwrap, docker or podman (auto: a container backend when an image is configured and its daemon answers, else bwrap)")
	fs.StringVar(&f.workspace, "workspace", "", "project directory, mounted read-write (default: the current directory)")
	fs.StringVar(&f.image, "image", "", "container image for docker/podman (default: $SANDBASH_IMAGE, else \"image\" in the workspace's .devcontainer/devcontainer.json)")
	fs.IntVar(&f.timeout, "timeout", int(sandbash.DefaultTimeout/time.Second), "seconds before the command gets SIGTERM (then SIGKILL 5 s later); 1 to 600")
	fs.StringVar(&f.network, "network", "none", "network: none (only the sandbox's own loopback) or on")
	fs.Var(&f.readable, "readable", "extra host `PATH` to mount read-only (repeatable)")
	fs.Var(&f.writable, "writable", "extra host `PATH` to mount read-write (repeatable)")
	fs.Var(&f.env, "env", "pass `NAME` from this environment, or set NAME=VALUE (repeatable)")
	fs.BoolVar(&f.confirm, "confirm", false, "show the command (control characters escaped) and ask y/n on the terminal before running it")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the live output")
	fs.BoolVar(&f.observation, "observation", false, "print the agent-facing observation text instead of the live output")
	fs.Var(&f.caches, "cache", "share a dependency cache copy-on-write: gradle, maven, cargo, go, npm, pip, or all (repeatable); the host's cache is read-only, writes stay in the session")
	fs.Var(&f.cacheDirs, "cache-dir", "share any host directory copy-on-write: `HOST:SANDBOX` (repeatable)")
	def := container.DefaultLimits()
	fs.StringVar(&f.memory, "memory", "", "docker/podman: memory limit, e.g. 512m or 8g (default 4g)")
	fs.Float64Var(&f.cpus, "cpus", def.CPUs, "docker/podman: CPU limit, fractional")
	fs.Int64Var(&f.pids, "pids", def.Pids, "docker/podman: most processes and threads at once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitFailed
	}
	rep := reporter{stdout: stdout, stderr: stderr, json: f.json}
	command := strings.Join(fs.Args(), " ")
	if fs.NArg() == 0 {
		return rep.fail(command, "", fmt.Errorf("no command given: sandbash run [flags] -- COMMAND (see sandbash run --help)"))
	}
	if f.json && f.observation {
		return rep.fail(command, "", errors.New("--json and --observation are exclusive: pick one"))
	}
	if f.timeout < 1 || f.timeout > 600 {
		return rep.fail(command, "", fmt.Errorf("--timeout %d: give between 1 and 600 seconds: %w", f.timeout, sandbash.ErrTimeoutRange))
	}
	req := sandbash.Request{Command: command, Timeout: time.Duration(f.timeout) * time.Second}
	if err := sandbash.CheckRequest(req, 0); err != nil {
		return rep.fail(command, "", err)
	}
	if f.network != string(backend.NetworkNone) && f.network != string(backend.NetworkOn) {
		return rep.fail(command, "", fmt.Errorf("--network %q: use none or on", f.network))
	}
	if f.workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return rep.fail(command, "", fmt.Errorf("cannot find the current directory (%v); give --workspace", err))
		}
		f.workspace = wd
	}
	limits, limitsGiven, err := f.limits(fs)
	if err != nil {
		return rep.fail(command, "", err)
	}
	img, err := resolveImage(f.image, os.Getenv("SANDBASH_IMAGE"), f.workspace)
	if err != nil {
		return rep.fail(command, "", err)
	}
	b, image, err := pickBackend(ctx, f.backend, img, containerOptions{limits: limits, progress: stderr, oneShot: true}, stderr)
	if err != nil {
		return rep.fail(command, f.backend, err)
	}
	if c, ok := b.(io.Closer); ok {
		defer c.Close()
	}
	if limitsGiven != "" && b.Name() == "bwrap" {
		return rep.fail(command, b.Name(), fmt.Errorf("%s: bwrap cannot enforce resource limits; they apply to --backend docker or podman", limitsGiven))
	}
	// Reap what sandbash processes that died left behind, alongside the call.
	if gc, ok := b.(collector); ok {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = gc.GC(ctx)
		}()
		defer func() { <-done }()
	}
	home, _ := os.UserHomeDir()
	caches, err := overlay.Resolve(f.caches, f.cacheDirs, home, overlay.HostGoEnv)
	if err != nil {
		return rep.fail(command, b.Name(), err)
	}
	cfg := sandbash.Config{
		Caches:    caches,
		Workspace: f.workspace,
		Readable:  f.readable,
		Writable:  f.writable,
		Network:   backend.Network(f.network),
		Env:       f.env,
		Image:     image,
	}
	if f.confirm {
		cfg.Confirm = terminalConfirmer{}
	}
	// Spill files must outlive this process when their path is printed.
	if f.json || f.observation {
		dir, err := outputDir()
		if err != nil {
			return rep.fail(command, b.Name(), err)
		}
		cfg.OutputDir = dir
	}
	s, err := sandbash.Open(ctx, b, cfg)
	if err != nil {
		return rep.fail(command, b.Name(), err)
	}
	if !f.json && !f.observation {
		req.Live = stdout
	}
	res, runErr := s.Run(ctx, req)
	if err := s.Close(); err != nil {
		fmt.Fprintf(stderr, "sandbash: closing the session: %v\n", err)
	}
	switch {
	case res == nil:
		return rep.fail(command, b.Name(), runErr)
	case f.json:
		rep.printJSON(res, runErr)
	case f.observation:
		fmt.Fprint(stdout, res.Observation())
	default:
		if res.TimedOut || res.OOMKilled || res.Canceled {
			fmt.Fprintf(stderr, "sandbash: %s\n", res.Status())
		}
	}
	switch {
	case res.Canceled:
		return 130
	case runErr != nil:
		if !f.json {
			fmt.Fprintf(stderr, "sandbash: %v\n", runErr)
		}
		return exitFailed
	case res.TimedOut:
		return exitTimedOut
	}
	return res.ExitCode
}

// limits reads --memory, --cpus and --pids, and names the ones given.
func (f *runFlags) limits(fs *flag.FlagSet) (container.Limits, string, error) {
	l := container.DefaultLimits()
	var given []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "memory", "cpus", "pids":
			given = append(given, "--"+fl.Name)
		}
	})
	if f.memory != "" {
		m, err := units.RAMInBytes(f.memory)
		if err != nil {
			return l, "", fmt.Errorf("--memory %q: give a size such as 512m or 8g", f.memory)
		}
		l.Memory = m
	}
	l.CPUs, l.Pids = f.cpus, f.pids
	if err := l.Validate(); err != nil {
		return l, "", err
	}
	return l, strings.Join(given, ", "), nil
}

// outputDir is where spill files of one-shot runs are kept:
// $XDG_STATE_HOME/sandbash/output, or ~/.local/state/sandbash/output.
func outputDir() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if !filepath.IsAbs(base) {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no place for spill files: set XDG_STATE_HOME or HOME (%v)", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	dir := filepath.Join(base, "sandbash", "output")
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
	Error       string `json:"error"`
}

// fail reports that nothing ran (or sandbash could not go on) and returns
// exit status 125.
func (r reporter) fail(command, backendName string, err error) int {
	if r.json {
		r.writeJSON(jsonResult{Backend: backendName, Command: command, Error: err.Error()})
	} else {
		fmt.Fprintf(r.stderr, "sandbash: %v\n", err)
	}
	return exitFailed
}

func (r reporter) printJSON(res *sandbash.Result, runErr error) {
	code := res.ExitCode
	j := jsonResult{
		Backend: res.Backend, Command: res.Command, ExitCode: &code,
		TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, DurationMS: res.Duration.Milliseconds(),
		Output: res.Output, OutputBytes: res.OutputBytes, Truncated: res.Truncated, SpillPath: res.SpillPath,
	}
	if runErr != nil {
		j.Error = runErr.Error()
	}
	r.writeJSON(j)
}

func (r reporter) writeJSON(j jsonResult) {
	enc := json.NewEncoder(r.stdout)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(j)
}
