package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/hostmount"
	"github.com/sandbash/sandbash/internal/owner"
)

const gcUsage = `Usage: sandbash gc [--all] [--session-ttl DURATION] [--namespace NAMESPACE]

Removes every sandbash-labelled container and volume whose owning sandbash
process is gone (killed mid-call, say) and ran as you (--all, as root: as
anyone), on each container backend that
answers, and (as root) the mounts such a process staged in /run/sandbash,
and its session directories (the CLI's, and those of programs using the
library, in $TMPDIR or /tmp); on a Kubernetes cluster that answers (found
as kubectl finds it), the pods of such processes and of gone pods that ran
sandbash, in --namespace;
closes CLI sessions idle for longer than --session-ttl (default
24h), and deletes the saved full outputs of one-shot runs older than that.
What live sandbash processes own, and sessions in use, are left alone. 'sandbash run' removes dead processes' leftovers in the
background each time it starts.
`

func gcCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, gcUsage) }
	ttl := fs.Duration("session-ttl", 24*time.Hour, "close CLI sessions idle for longer than this")
	all := fs.Bool("all", false, "as root: also remove what dead sandbash processes of other users left")
	namespace := fs.String("namespace", "", "kubernetes: the namespace to collect pods in (default: the kubeconfig context's)")
	if ok, code := parseFlags(fs, args); !ok {
		return code
	}
	// Every backend is visited: the build with Kubernetes does it, if
	// installed.
	if err := handToKubernetesBuild(); err != nil {
		fmt.Fprintln(stderr, "sandbash gc: "+err.Error())
		return 1
	}
	if *all && os.Geteuid() != 0 {
		fmt.Fprintf(stderr, "sandbash gc: --all removes other users' leftovers and needs root; without it, gc removes only yours\n")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sandbash gc: unexpected argument %q\n\n%s", fs.Arg(0), gcUsage)
		return 2
	}
	failed := false
	sessions, err := listSessions()
	if err != nil {
		fmt.Fprintf(stderr, "sandbash gc: sessions: %v\n", err)
		failed = true
	}
	if n, err := pruneOutputs(*ttl); err != nil {
		fmt.Fprintf(stderr, "sandbash gc: saved outputs: %v\n", err)
		failed = true
	} else if n > 0 {
		fmt.Fprintf(stdout, "output: deleted %d saved outputs older than %v\n", n, *ttl)
	}
	for _, l := range sessions {
		if idle := time.Since(l.used); idle > *ttl {
			if err := closeCLISession(l.st.ID, true); err != nil {
				fmt.Fprintf(stderr, "sandbash gc: session %s: %v\n", l.st.ID, err)
				failed = true
				continue
			}
			fmt.Fprintf(stdout, "session: closed %s (idle %s)\n", l.st.ID, idle.Round(time.Minute))
		}
	}
	// Containers and volumes, and bwrap's cgroups (as root), that a killed
	// sandbash left.
	for _, c := range allBackends() {
		b, err := c.open(ctx, containerOptions{limits: container.DefaultLimits(), progress: io.Discard})
		if err != nil {
			if !errors.Is(err, backend.ErrUnavailable) {
				fmt.Fprintf(stderr, "sandbash gc: %s: %v\n", c.name, err)
				failed = true
			}
			continue
		}
		gc, ok := b.(backend.Collector)
		if !ok {
			b.Close()
			continue
		}
		removed, err := gc.GC(ctx, *all)
		b.Close()
		for _, r := range removed {
			fmt.Fprintf(stdout, "%s: removed %s\n", c.name, r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandbash gc: %s: %v\n", c.name, err)
			failed = true
		}
		fmt.Fprintf(stdout, "%s: %d removed\n", c.name, len(removed))
	}
	// Kubernetes: the pods of dead sandbash processes, and of gone pods
	// that ran sandbash, in the namespace.
	removed, err := kubernetesGC(ctx, *namespace, *all)
	for _, r := range removed {
		fmt.Fprintf(stdout, "kubernetes: removed %s\n", r)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sandbash gc: kubernetes: %v\n", err)
		failed = true
	} else if removed != nil {
		fmt.Fprintf(stdout, "kubernetes: %d removed\n", len(removed))
	}
	// Session directories: the CLI's, and the library's default place
	// (the temporary directory) for programs that embed sandbash.
	parents := []string{os.TempDir()}
	if base, err := stateBase(); err == nil {
		parents = append(parents, filepath.Join(base, "runs"))
	}
	for _, parent := range parents {
		removed, err := sandbash.SweepDirs(parent)
		for _, r := range removed {
			fmt.Fprintf(stdout, "session: removed %s\n", r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandbash gc: session directories in %s: %v\n", parent, err)
			failed = true
		}
	}
	if os.Geteuid() == 0 {
		removed, err := hostmount.Sweep(owner.Gone)
		for _, r := range removed {
			fmt.Fprintf(stdout, "mounts: removed %s\n", r)
		}
		if err != nil {
			fmt.Fprintf(stderr, "sandbash gc: staged mounts: %v\n", err)
			failed = true
		}
	}
	if failed {
		return 1
	}
	return 0
}

// pruneOutputs deletes spill files of one-shot runs older than ttl.
func pruneOutputs(ttl time.Duration) (int, error) {
	base, err := stateBase()
	if err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(filepath.Join(base, "output"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || time.Since(fi.ModTime()) <= ttl {
			continue
		}
		if err := os.Remove(filepath.Join(base, "output", e.Name())); err == nil {
			n++
		}
	}
	return n, nil
}
