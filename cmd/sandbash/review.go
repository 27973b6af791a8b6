package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/internal/review"
	"github.com/sandbash/sandbash/internal/termsafe"
)

const reviewUsage = `Reviewing a session's workspace (sessions opened with --workspace-mode overlay):
  sandbash session diff ID [--stat] [PATH...]     what the session changed: a unified diff
                                                 (git's format) of the text files, after a
                                                 list of the rest; --stat: one line each
  sandbash session apply ID [--expect DIGEST] [PATH...]
                                                 write the changes into the workspace;
                                                 --expect: only if they are still what
                                                 the diff with that digest showed
  sandbash session reset ID [PATH...]            discard the changes
  sandbash session checkpoint ID NAME            save the session's layer as NAME
  sandbash session restore ID NAME               bring the session's view back to NAME
  sandbash session checkpoints ID                list the checkpoints

PATHs are relative to the workspace (or absolute inside it); without, all.
Apply refuses a file that changed in the workspace since the session opened,
git's hooks and configuration (.git/hooks, .git/config, .git/info, ...),
and special files; it applies the rest, and says what it refused (exit 1).
None of these runs while a command runs in the session. diff prints the
patch's digest on stderr: give it to apply --expect, so that what lands is
what you reviewed, even if the agent ran more commands in between.
`

// reviewCmd runs a review subcommand (diff, apply, reset, checkpoint,
// restore, checkpoints) on a CLI session, reading and changing
// its layers in its directory: nothing is mounted between runs, and the
// session's lock keeps runs out meanwhile.
func reviewCmd(ctx context.Context, sub string, args []string, stdout, stderr io.Writer) int {
	name := "sandbash session " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, reviewUsage) }
	stat := false
	if sub == "diff" {
		fs.BoolVar(&stat, "stat", false, "one line per change, and a summary")
	}
	expect := ""
	if sub == "apply" {
		fs.StringVar(&expect, "expect", "", "apply only if the changes are still those whose diff had this `DIGEST` (sandbash session diff prints it)")
	}
	// The ID comes first; flags may follow it.
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprint(stdout, reviewUsage)
			return 0
		}
		fmt.Fprintf(stderr, "%s: give the session ID first (see sandbash session list)\n\n%s", name, reviewUsage)
		return 2
	}
	id := args[0]
	if ok, code := parseFlags(fs, args[1:]); !ok {
		return code
	}
	rest := fs.Args()
	fail := func(err error) int { fmt.Fprintf(stderr, "%s: %v\n", name, err); return exitFailed }
	switch sub {
	case "checkpoint", "restore":
		if len(rest) != 1 {
			fmt.Fprintf(stderr, "%s: give the session ID and one checkpoint NAME\n", name)
			return 2
		}
	case "checkpoints":
		if len(rest) != 0 {
			fmt.Fprintf(stderr, "%s: give the session ID only\n", name)
			return 2
		}
	}
	sdir, st, err := loadSession(id)
	if err != nil {
		return fail(err)
	}
	if st.Flags.WorkspaceMode != string(sandbash.WorkspaceOverlay) {
		return fail(fmt.Errorf("session %s's workspace is in direct mode: its commands wrote %s itself, and there is nothing to review. Open a session with --workspace-mode overlay to review changes before they land", id, st.Flags.Workspace))
	}
	release, err := lockSession(ctx, sdir, false)
	if err != nil {
		return fail(err)
	}
	defer release()
	l, err := review.Open(filepath.Join(sdir, "dir", "review"))
	if err != nil {
		return fail(err)
	}
	paths, err := workspacePaths(st.Flags.Workspace, l.Host(), rest)
	if err != nil {
		return fail(err)
	}
	out, flush := termsafe.ForTerminal(stdout, termsafe.Options{})
	defer flush()
	switch sub {
	case "diff":
		cs, err := l.Changes(paths...)
		if err != nil {
			return fail(err)
		}
		if stat {
			err = cs.WriteStat(out)
		} else {
			err = cs.WritePatch(out)
		}
		if err != nil {
			return fail(err)
		}
		if !stat {
			d, err := patchDigest(cs)
			if err != nil {
				return fail(err)
			}
			fmt.Fprintf(stderr, "%s: digest %s (sandbash session apply %s --expect %s applies exactly this)\n", name, d, id, d)
		}
	case "apply":
		if expect != "" {
			cs, err := l.Changes(paths...)
			if err != nil {
				return fail(err)
			}
			d, err := patchDigest(cs)
			if err != nil {
				return fail(err)
			}
			if d != expect {
				return fail(fmt.Errorf("the session's changes are no longer those you reviewed (their diff's digest is %s, not %s): nothing applied; review them again (sandbash session diff %s)", d, expect, id))
			}
		}
		res, err := l.Apply(paths...)
		if res != nil {
			fmt.Fprintf(out, "applied %d path(s) to %s\n", len(res.Applied), l.Host())
			for _, r := range res.Refused {
				fmt.Fprintf(stderr, "%s: not applied: %s: %s\n", name, r.Path, r.Reason)
			}
		}
		if err != nil {
			return fail(err)
		}
		if len(res.Refused) > 0 {
			fmt.Fprintf(stderr, "%s: %d change(s) not applied; they stay in the session (sandbash session diff %s)\n", name, len(res.Refused), id)
			return 1
		}
	case "reset":
		done, err := l.Reset(paths...)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "reset %d change(s)\n", len(done))
	case "checkpoint":
		if err := l.Checkpoint(rest[0]); err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "checkpoint %s saved\n", rest[0])
	case "restore":
		if err := l.Restore(rest[0]); err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "restored checkpoint %s\n", rest[0])
	case "checkpoints":
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tCREATED")
		for _, c := range l.Checkpoints() {
			fmt.Fprintf(w, "%s\t%s\n", c.Name, c.Created.Local().Format(time.DateTime))
		}
		w.Flush()
	}
	return 0
}

// patchDigest is the digest of the patch diff prints for cs.
func patchDigest(cs *review.Changes) (string, error) {
	h := sha256.New()
	if err := cs.WritePatch(h); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:32], nil
}

// workspacePaths turns PATH arguments into paths relative to the
// workspace: relative ones are, absolute ones must lie inside it (as
// given, or as the workspace resolves).
func workspacePaths(given, real string, args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if !filepath.IsAbs(a) {
			out = append(out, a)
			continue
		}
		a = filepath.Clean(a)
		found := false
		for _, root := range []string{filepath.Clean(given), real} {
			if r, err := filepath.Rel(root, a); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
				out, found = append(out, r), true
				break
			}
		}
		if !found {
			return nil, errors.New(a + " is not inside the workspace " + given)
		}
	}
	return out, nil
}

// cliSandbox runs an MCP connection's calls in a CLI session, one at a
// time and each as `run --session` does (the session opens, runs the call
// and closes), so that the user can diff and apply between calls; its
// workspace tool works on the session's layers as `session diff` and
// `session checkpoint` do.
type cliSandbox struct {
	id     string
	stderr io.Writer
}

func (c *cliSandbox) Run(ctx context.Context, req sandbash.Request) (*sandbash.Result, error) {
	p, release, err := openCLISession(ctx, c.id, flag.NewFlagSet("mcp", flag.ContinueOnError), c.stderr)
	if err != nil {
		return nil, err
	}
	defer release()
	defer p.close()
	s, err := p.open(ctx, p.cfg)
	if err != nil {
		return nil, err
	}
	p.reap() // alongside the call
	res, err := s.Run(ctx, req)
	if cerr := s.Close(); cerr != nil && err == nil && res != nil {
		err = fmt.Errorf("closing the session: %w", cerr)
	}
	return res, err
}

// Close does nothing: the CLI session outlives the connection.
func (c *cliSandbox) Close() error { return nil }

// layer holds the session's lock (failing when a call runs) and opens
// its layers.
func (c *cliSandbox) layer(ctx context.Context) (*review.Layer, func(), error) {
	sdir, _, err := loadSession(c.id)
	if err != nil {
		return nil, nil, err
	}
	release, err := lockSession(ctx, sdir, false)
	if err != nil {
		return nil, nil, err
	}
	l, err := review.Open(filepath.Join(sdir, "dir", "review"))
	if err != nil {
		release()
		return nil, nil, err
	}
	return l, release, nil
}

func (c *cliSandbox) Diff(ctx context.Context, paths ...string) (*sandbash.Changes, error) {
	l, release, err := c.layer(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return l.Changes(paths...)
}

func (c *cliSandbox) Checkpoint(ctx context.Context, name string) error {
	l, release, err := c.layer(ctx)
	if err != nil {
		return err
	}
	defer release()
	return l.Checkpoint(name)
}

func (c *cliSandbox) Restore(ctx context.Context, name string) error {
	l, release, err := c.layer(ctx)
	if err != nil {
		return err
	}
	defer release()
	return l.Restore(name)
}

func (c *cliSandbox) Checkpoints() ([]sandbash.Checkpoint, error) {
	l, release, err := c.layer(context.Background())
	if err != nil {
		return nil, err
	}
	defer release()
	return l.Checkpoints(), nil
}

// mcpSession loads the CLI session `mcp --session ID` serves, refusing
// session flags beside it (the session keeps its own).
func mcpSession(fs *flag.FlagSet, id string) (*sessionState, error) {
	own := flag.NewFlagSet("", flag.ContinueOnError)
	var scratch sessionFlags
	scratch.register(own)
	var extra []string
	fs.Visit(func(fl *flag.Flag) {
		if own.Lookup(fl.Name) != nil {
			extra = append(extra, "--"+fl.Name)
		}
	})
	if len(extra) > 0 {
		return nil, fmt.Errorf("%s: a session keeps the flags it was opened with; open a new session to change them", strings.Join(extra, ", "))
	}
	_, st, err := loadSession(id)
	return st, err
}

// checkCLISession opens and closes the CLI session id under its lock, as
// a run would, to check it once when the server starts.
func checkCLISession(ctx context.Context, id string, stderr io.Writer) (*prepared, error) {
	p, release, err := openCLISession(ctx, id, flag.NewFlagSet("mcp", flag.ContinueOnError), stderr)
	if err != nil {
		return nil, err
	}
	defer release()
	p.reap()
	s, err := p.open(ctx, p.cfg)
	if err == nil {
		err = s.Close()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}
