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
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/workspace"
)

const sessionUsage = `Usage:
  sandbash session open [run's session flags]   open a session; prints its ID
  sandbash session list                          the open sessions
  sandbash session close ID                      close one: its /tmp, HOME and cache layers go

A CLI session keeps a sandbox's /tmp, HOME and cache layers between separate
sandbash processes: 'sandbash run --session ID -- CMD' runs in it, with the
flags it was opened with, and the backend and image it chose then (it never
looks at devcontainer.json or SANDBASH_IMAGE again). Runs in one session are
serialised: a second 'run --session' waits until the first is done. Sessions idle for longer than
24 hours are closed by 'sandbash gc'. State lives in $XDG_STATE_HOME/sandbash
(or ~/.local/state/sandbash).

Open takes the flags of 'sandbash run' that describe a session: --backend,
--workspace, --image, --network, --readable, --writable, --env, --cache,
--cache-dir, --memory, --cpus, --pids, --confirm, --workspace-mode.

` + reviewUsage

// sessionState is what `session open` keeps, as session.json.
type sessionState struct {
	ID      string `json:"id"`
	Backend string `json:"backend"`
	// Image is the image the session opened with and where it came from.
	// Runs use it and Backend, and never resolve them again: nothing
	// written in the workspace since can switch them.
	Image   *imageChoice `json:"image,omitempty"`
	Created time.Time    `json:"created"`
	Flags   sessionFlags `json:"flags"`
	// Sealed is what the session mounts and what those paths led to at
	// open; every run refuses if one now leads elsewhere (sandbash.Config).
	Sealed *workspace.Sealed `json:"sealed,omitempty"`
}

var sessionIDRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{12}$`) })

func sessionsDir() (string, error) {
	base, err := stateBase()
	return filepath.Join(base, "sessions"), err
}

func sessionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" || args[0] == "help" {
		fmt.Fprint(stdout, sessionUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "open":
		return sessionOpen(ctx, args[1:], stdout, stderr)
	case "list":
		return sessionList(stdout, stderr)
	case "diff", "apply", "reset", "checkpoint", "restore", "checkpoints":
		return reviewCmd(ctx, args[0], args[1:], stdout, stderr)
	case "close":
		if len(args) != 2 {
			fmt.Fprintf(stderr, "sandbash session close: give one session ID (see sandbash session list)\n")
			return 2
		}
		if err := closeCLISession(args[1], false); err != nil {
			fmt.Fprintf(stderr, "sandbash session close: %v\n", err)
			return exitFailed
		}
		return 0
	}
	fmt.Fprintf(stderr, "sandbash session: unknown subcommand %q\n\n%s", args[0], sessionUsage)
	return 2
}

func sessionOpen(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f sessionFlags
	fs := flag.NewFlagSet("session open", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, sessionUsage+"\nFlags:\n"); fs.PrintDefaults() }
	f.register(fs)
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sandbash session open: %v\n", withFlags(err))
		return exitFailed
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q: a session runs nothing when it opens; use sandbash run --session ID -- CMD", fs.Arg(0)))
	}
	if err := f.parsed(fs); err != nil {
		return fail(err)
	}
	// The session's environment is fixed now: names passed through take
	// their values from this environment.
	env, err := sandbash.ResolveEnv(f.Env)
	if err != nil {
		return fail(err)
	}
	f.Env = env
	dir, err := sessionsDir()
	if err != nil {
		return fail(err)
	}
	p, err := f.prepare(ctx, stderr, true)
	if err != nil {
		return fail(err)
	}
	p.reap()
	defer p.close()
	st := sessionState{ID: sandbash.NewID(), Backend: p.b.Name(), Image: &p.image, Created: time.Now().UTC(), Flags: f}
	sdir := filepath.Join(dir, st.ID)
	if err := os.MkdirAll(sdir, 0o700); err != nil {
		return fail(err)
	}
	// Open once, so that a session that cannot work fails now.
	p.cfg.Dir, p.cfg.ID = filepath.Join(sdir, "dir"), st.ID
	s, err := sandbash.Open(ctx, p.b, p.cfg)
	if err != nil {
		_ = sandbash.RemoveDir(sdir)
		return fail(err)
	}
	st.Sealed = s.Sealed()
	if err := s.Close(); err != nil {
		_ = sandbash.RemoveDir(sdir)
		return fail(err)
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(sdir, "session.json"), b, 0o600); err != nil {
		_ = sandbash.RemoveDir(sdir)
		return fail(err)
	}
	fmt.Fprintln(stdout, st.ID)
	return 0
}

// lockSession takes the session's lock, waiting for another run to finish
// (or, with wait false, failing at once). The returned func releases it.
func lockSession(ctx context.Context, sdir string, wait bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(sdir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || !wait {
			f.Close()
			return nil, fmt.Errorf("session %s is in use by a running command; try again when it ends", filepath.Base(sdir))
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func loadSession(id string) (string, *sessionState, error) {
	if !sessionIDRE().MatchString(id) {
		return "", nil, fmt.Errorf("%q is not a session ID; see sandbash session list", id)
	}
	dir, err := sessionsDir()
	if err != nil {
		return "", nil, err
	}
	sdir := filepath.Join(dir, id)
	b, err := os.ReadFile(filepath.Join(sdir, "session.json"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("no session %s (closed, or collected after 24 hours idle); open one with sandbash session open", id)
	}
	if err != nil {
		return "", nil, err
	}
	var st sessionState
	if err := json.Unmarshal(b, &st); err != nil {
		return "", nil, fmt.Errorf("session %s: %s is damaged: %v; close it", id, filepath.Join(sdir, "session.json"), err)
	}
	return sdir, &st, nil
}

// openCLISession prepares a run in a CLI session, holding its lock until
// the returned release is called.
func openCLISession(ctx context.Context, id string, fs *flag.FlagSet, stderr io.Writer) (*prepared, func(), error) {
	var extra []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "session", "timeout", "json", "observation":
		default:
			extra = append(extra, "--"+fl.Name)
		}
	})
	if len(extra) > 0 {
		return nil, nil, fmt.Errorf("%s: a session keeps the flags it was opened with; open a new session to change them", strings.Join(extra, ", "))
	}
	sdir, st, err := loadSession(id)
	if err != nil {
		return nil, nil, err
	}
	release, err := lockSession(ctx, sdir, true)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	_ = os.Chtimes(filepath.Join(sdir, "session.json"), now, now) // last used, for gc
	f := st.Flags
	f.Backend, f.opened = st.Backend, st.Image
	if f.opened == nil { // opened by a sandbash that did not record it
		switch {
		case st.Backend == "bwrap":
			f.opened = &imageChoice{}
		case f.Image != "":
			f.opened = &imageChoice{Ref: f.Image, Source: "--image"}
		default:
			release()
			return nil, nil, fmt.Errorf("session %s was opened by an older sandbash that did not record its image; close it (sandbash session close %s) and open a new one", id, id)
		}
	}
	p, err := f.prepare(ctx, stderr, true)
	if err != nil {
		release()
		return nil, nil, err
	}
	p.cfg.Dir, p.cfg.ID, p.cfg.Sealed = filepath.Join(sdir, "dir"), st.ID, st.Sealed
	return p, release, nil
}

// closeCLISession removes a session's state. With ifIdle, a session in use
// is left alone without error.
func closeCLISession(id string, ifIdle bool) error {
	sdir, _, err := loadSession(id)
	if err != nil {
		return err
	}
	release, err := lockSession(context.Background(), sdir, false)
	if err != nil {
		if ifIdle {
			return nil
		}
		return err
	}
	defer release()
	return sandbash.RemoveDir(sdir)
}

type listed struct {
	st   *sessionState
	used time.Time
}

func listSessions() ([]listed, error) {
	dir, err := sessionsDir()
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	var out []listed
	for _, e := range entries {
		_, st, err := loadSession(e.Name())
		if err != nil {
			continue
		}
		fi, err := os.Stat(filepath.Join(dir, e.Name(), "session.json"))
		if err != nil {
			continue
		}
		out = append(out, listed{st, fi.ModTime()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].st.Created.Before(out[j].st.Created) })
	return out, nil
}

func sessionList(stdout, stderr io.Writer) int {
	ls, err := listSessions()
	if err != nil {
		fmt.Fprintf(stderr, "sandbash session list: %v\n", err)
		return exitFailed
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tBACKEND\tWORKSPACE\tCREATED\tIDLE")
	for _, l := range ls {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", l.st.ID, l.st.Backend, l.st.Flags.Workspace,
			l.st.Created.Local().Format(time.DateTime), time.Since(l.used).Round(time.Second))
	}
	w.Flush()
	return 0
}
