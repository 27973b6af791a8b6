// Command sandbash-bench measures, side by side in one run, the per-call
// time of `true` through sandbash on a container backend, warm (a container
// was ready) and cold (opening a session and running its first call), and
// through the engine's own CLI (`docker run --rm --network none IMAGE true`,
// or podman's, with the rlimits Podman needs on hosts like this one).
// It prints the medians and the ratios to the CLI, and exits 1 when a target
// is missed: warm at most 0.05x the CLI, cold at most 1.0x.
//
//	go run ./cmd/sandbash-bench -backend docker -image sandbash-test:latest
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/docker"
)

func main() {
	name := flag.String("backend", "docker", "backend to measure: docker, or podman (built with the podman tags)")
	image := flag.String("image", "sandbash-test:latest", "image to run")
	n := flag.Int("n", 20, "calls per measurement")
	flag.Parse()
	if err := run(*name, *image, *n); err != nil {
		fmt.Fprintln(os.Stderr, "sandbash-bench:", err)
		os.Exit(1)
	}
}

// engine opens a backend and names the engine CLI's equivalent of a call.
type engine func(ctx context.Context, image string) (b backend.Backend, cli []string, err error)

var engines = map[string]engine{
	"docker": func(ctx context.Context, image string) (backend.Backend, []string, error) {
		d, err := docker.New(ctx)
		return d, []string{"docker", "run", "--rm", "--network", "none", image, "true"}, err
	},
}

func run(name, image string, n int) error {
	ctx := context.Background()
	open, ok := engines[name]
	if !ok {
		return fmt.Errorf("-backend %q: this build measures %v", name, slices.Sorted(maps.Keys(engines)))
	}
	b, cliArgs, err := open(ctx, image)
	if err != nil {
		return err
	}
	if c, ok := b.(io.Closer); ok {
		defer c.Close()
	}
	ws, err := os.MkdirTemp("", "sbbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(ws)
	cfg := sandbash.Config{Workspace: ws, Image: image}

	// One untimed round of each, so images and caches are warm for all.
	if out, err := exec.Command(cliArgs[0], cliArgs[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %v: %s", cliArgs, err, out)
	}
	var cli, cold, warm []time.Duration
	for range n {
		start := time.Now()
		if out, err := exec.Command(cliArgs[0], cliArgs[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %v: %s", cliArgs, err, out)
		}
		cli = append(cli, time.Since(start))

		start = time.Now()
		s, err := sandbash.Open(ctx, b, cfg)
		if err != nil {
			return err
		}
		if err := call(ctx, s); err != nil {
			s.Close()
			return err
		}
		cold = append(cold, time.Since(start))
		if err := s.Close(); err != nil {
			return err
		}
	}
	s, err := sandbash.Open(ctx, b, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	for range n {
		// Agents think between calls; the pool refills meanwhile.
		if err := s.WaitWarm(ctx); err != nil {
			return err
		}
		start := time.Now()
		if err := call(ctx, s); err != nil {
			return err
		}
		warm = append(warm, time.Since(start))
	}

	mc, mcold, mwarm := median(cli), median(cold), median(warm)
	fmt.Printf("backend %s, image %s, %d calls each, medians:\n", name, image, n)
	fmt.Printf("  %-34s %10v\n", "CLI: "+strings.Join(cliArgs[:len(cliArgs)-2], " "), mc.Round(time.Microsecond))
	fmt.Printf("  %-34s %10v  %.3fx the CLI (target <= 1.0x)\n", "sandbash cold (open + first call)", mcold.Round(time.Microsecond), ratio(mcold, mc))
	fmt.Printf("  %-34s %10v  %.3fx the CLI (target <= 0.05x)\n", "sandbash warm", mwarm.Round(time.Microsecond), ratio(mwarm, mc))
	var missed []string
	if ratio(mcold, mc) > 1.0 {
		missed = append(missed, "cold")
	}
	if ratio(mwarm, mc) > 0.05 {
		missed = append(missed, "warm")
	}
	if len(missed) > 0 {
		return fmt.Errorf("targets missed: %v", missed)
	}
	fmt.Println("targets met")
	return nil
}

func call(ctx context.Context, s *sandbash.Session) error {
	r, err := s.Run(ctx, sandbash.Request{Command: "true"})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 {
		return fmt.Errorf("true exited %d: %s", r.ExitCode, r.Output)
	}
	return nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }
