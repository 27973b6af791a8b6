package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/sandbash/sandbash/internal/devcontainer"
)

const trustUsage = `Usage: sandbash trust [--workspace DIR] [--revoke]

Approves the workspace's devcontainer.json as it is now.

sandbash runs in the image a workspace's .devcontainer/devcontainer.json (or
.devcontainer.json) names only while the file is exactly as you last
approved it: commands in the sandbox can rewrite it, and the image decides
what runs and what a pull would reach. When it changes, runs and new
sessions refuse, saying so, until you look at it and approve it again.
'sandbash trust' shows the image the file names and records your approval;
--revoke withdraws it. --image or SANDBASH_IMAGE bypass the file entirely.
Open sessions keep the image they opened with, whatever the file says later.

sandbash never pulls an image that only devcontainer.json names: pull it
yourself (docker pull IMAGE, podman pull IMAGE), or give it with --image.

Approvals live in $XDG_STATE_HOME/sandbash/trust (or
~/.local/state/sandbash/trust), by the workspace's absolute path.

Flags:
`

// trustRecord is one approval: the workspace, which file, and the SHA-256
// of the content approved.
type trustRecord struct {
	Workspace string    `json:"workspace"`
	File      string    `json:"file"` // relative to the workspace
	SHA256    string    `json:"sha256"`
	Image     string    `json:"image"`
	Approved  time.Time `json:"approved"`
}

func trustCmd(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("trust", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, trustUsage); fs.PrintDefaults() }
	ws := fs.String("workspace", "", "project directory (default: the current directory)")
	revoke := fs.Bool("revoke", false, "withdraw the approval instead")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	fail := func(err error) int { fmt.Fprintf(stderr, "sandbash trust: %v\n", err); return exitFailed }
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q; give the workspace with --workspace", fs.Arg(0)))
	}
	if *ws == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fail(fmt.Errorf("cannot find the current directory (%v); give --workspace", err))
		}
		*ws = wd
	}
	key := canonicalWorkspace(*ws)
	path, err := trustFile(key)
	if err != nil {
		return fail(err)
	}
	if *revoke {
		err := os.Remove(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(stdout, "no approval was recorded for %s\n", key)
		case err != nil:
			return fail(err)
		default:
			fmt.Fprintf(stdout, "revoked the approval of %s's devcontainer.json\n", key)
		}
		return 0
	}
	f, err := devcontainer.Read(*ws)
	if errors.Is(err, devcontainer.ErrNotFound) {
		return fail(fmt.Errorf("%s has no devcontainer.json (looked for %v): nothing to approve", key, devcontainer.Files))
	}
	if err != nil {
		return fail(err)
	}
	rel, err := filepath.Rel(*ws, f.Path)
	if err != nil {
		return fail(err)
	}
	rec := trustRecord{Workspace: key, File: rel, SHA256: f.Sum, Image: f.Image, Approved: time.Now().UTC()}
	if err := saveTrust(path, rec); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "approved %s (sha256 %s)\nimage: %s\n", f.Path, f.Sum, f.Image)
	fmt.Fprintf(stdout, "Runs in %s use this image until the file changes. sandbash does not pull it: if it is not on this machine, pull it yourself (docker pull %s, or podman pull %s).\n", key, f.Image, f.Image)
	return 0
}

// canonicalWorkspace is the workspace's absolute path with symlinks
// resolved: the key of its approval.
func canonicalWorkspace(ws string) string {
	abs, err := filepath.Abs(ws)
	if err != nil {
		return filepath.Clean(ws)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// trustFile is where the approval of workspace key is kept.
func trustFile(key string) (string, error) {
	base, err := stateBase()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(base, "trust", hex.EncodeToString(sum[:16])+".json"), nil
}

func saveTrust(path string, rec trustRecord) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("creating sandbash's state directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(rec, "", "  ")
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("recording the approval in %s: %w", dir, err)
	}
	return nil
}

// loadTrust returns the approval recorded for workspace key, or nil.
func loadTrust(key string) (*trustRecord, error) {
	path, err := trustFile(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec trustRecord
	if json.Unmarshal(b, &rec) != nil || rec.Workspace != key {
		return nil, nil // damaged: as good as none; trust records a new one
	}
	return &rec, nil
}

// workspaceImage is the image the workspace's devcontainer.json names, if
// the user approved the file as it is now (none without the file).
func workspaceImage(ws string) (imageChoice, error) {
	f, err := devcontainer.Read(ws)
	switch {
	case errors.Is(err, devcontainer.ErrNotFound):
		return imageChoice{}, nil
	case err != nil:
		return imageChoice{}, err
	}
	key := canonicalWorkspace(ws)
	rec, err := loadTrust(key)
	if err != nil {
		return imageChoice{}, err
	}
	rel, _ := filepath.Rel(ws, f.Path)
	approve := fmt.Sprintf("sandbash acts on a workspace's devcontainer.json only as you last approved it, because commands in the sandbox can rewrite it. Check the file, then approve it with: sandbash trust --workspace %s (or give the image yourself with --image, or use --backend bwrap, which takes none)", shellQuote(key))
	switch {
	case rec == nil:
		return imageChoice{}, fmt.Errorf("%s names image %s, and you have not approved it: %s", f.Path, f.Image, approve)
	case rec.SHA256 != f.Sum || rec.File != rel:
		return imageChoice{}, fmt.Errorf("%s changed since you approved it on %s (it names image %s now; you approved %s): %s",
			f.Path, rec.Approved.Local().Format(time.DateTime), f.Image, rec.Image, approve)
	}
	return imageChoice{Ref: f.Image, Source: f.Path, Workspace: true}, nil
}

var shellSafe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_./,:@+=-]+$`) })

// shellQuote quotes s for a POSIX shell, for a command the user may paste.
func shellQuote(s string) string {
	if shellSafe().MatchString(s) {
		return s
	}
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += `'\''`
		} else {
			out += string(r)
		}
	}
	return out + "'"
}
