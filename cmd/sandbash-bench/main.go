// Command sandbash-bench measures sandbash against the sandbox it wraps,
// side by side in one run, for every backend this machine has, and prints
// one table. Each row is a ratio to a reference run interleaved with it
// (the engine's own CLI, `docker run --rm --network none IMAGE ...` or
// podman's, or a plain bwrap with the same mounts), or an absolute figure:
//
//   - output: 1 GiB through one call (`dd if=/dev/zero bs=64k ...`,
//     `sandbash run --json`), as throughput and sandbash's peak RSS;
//   - one-shot: the whole `sandbash run -- true` process vs the reference;
//   - in-process (bwrap): Session.Run("true") vs a plain bwrap;
//   - back-to-back: 20 `bash` tool calls with no pause through one
//     `sandbash mcp` connection vs 20 reference runs;
//   - warm (containers): a call after the pool refilled vs the CLI;
//   - concurrent: 32 sessions x 10 calls at once, all must succeed and
//     leave nothing behind.
//
// It exits 1 when a target is missed. Run it with `make bench`, which
// builds bin/sandbash first:
//
//	go run -tags ... ./cmd/sandbash-bench -sandbash bin/sandbash
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
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
	"github.com/sandbash/sandbash/backend/docker"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
)

// Targets (issue 15).
const (
	minThroughput  = 500e6 // bytes/s through one call
	maxRSS         = 64 << 20
	maxOneShotCtr  = 0.8 // one-shot vs `docker run --rm`
	maxOneShotBwr  = 3.0 // one-shot vs a plain bwrap
	maxInProcBwrap = 1.5 // Session.Run vs a plain bwrap
	maxBackToBack  = 0.5 // 20 calls through mcp vs 20 CLI runs
	maxWarm        = 0.05
)

func main() {
	only := flag.String("backends", "", "comma-separated backends to measure (default: every one this machine has: bwrap, docker, podman; kubernetes, on the cluster of scripts/k8s.sh, only when named)")
	bin := flag.String("sandbash", "bin/sandbash", "the sandbash binary to measure (make build)")
	n := flag.Int("n", 20, "runs per ratio (medians) and calls per back-to-back row")
	size := flag.Int64("bytes", 1<<30, "output of the throughput row")
	sessions := flag.Int("sessions", 32, "concurrent sessions")
	calls := flag.Int("calls", 10, "calls per concurrent session")
	dockerImage := flag.String("docker-image", "sandbash-test:latest", "image for docker")
	podmanImage := flag.String("podman-image", "localhost/sandbash-test:latest", "image for podman")
	rows := flag.String("rows", "", "comma-separated rows to measure: throughput, one-shot, warm, back-to-back, concurrent (default: all; a partial run is for looking into one row, not for the README)")
	flag.Parse()
	images := map[string]string{"docker": *dockerImage, "podman": *podmanImage, "kubernetes": *dockerImage}
	abs, err := filepath.Abs(*bin)
	if err == nil {
		_, err = os.Stat(abs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "sandbash-bench: %v: build sandbash first (make build) or give -sandbash PATH\n", err)
		os.Exit(1)
	}
	b := &bench{bin: abs, n: *n, size: *size, sessions: *sessions, calls: *calls}
	if *rows != "" {
		b.rows = strings.Split(*rows, ",")
		for _, r := range b.rows {
			if !slices.Contains(rowNames, r) {
				fmt.Fprintf(os.Stderr, "sandbash-bench: -rows: no row %q: give some of %s\n", r, strings.Join(rowNames, ", "))
				os.Exit(2)
			}
		}
	}
	var missed []string
	for _, name := range []string{"bwrap", "docker", "podman", "kubernetes"} {
		if *only == "" && name == "kubernetes" {
			continue // only when asked for: -backends kubernetes (make bench-k8s)
		}
		if *only != "" && !slices.Contains(strings.Split(*only, ","), name) {
			continue
		}
		t, err := b.target(name, images[name])
		if err != nil {
			fmt.Fprintf(os.Stderr, "sandbash-bench: %s: not measured: %v\n", name, err)
			if *only != "" {
				missed = append(missed, name+" unavailable")
			}
			continue
		}
		fmt.Fprintf(os.Stderr, "sandbash-bench: measuring %s ...\n", name)
		if err := b.measure(t); err != nil {
			fmt.Fprintf(os.Stderr, "sandbash-bench: %s: %v\n", name, err)
			missed = append(missed, name+": "+err.Error())
		}
		t.close()
	}
	missed = append(missed, b.print(os.Stdout)...)
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
	if len(missed) > 0 {
		fmt.Printf("targets missed: %s\n", strings.Join(missed, "; "))
		os.Exit(1)
	}
	fmt.Println("all targets met")
}

type bench struct {
	bin                   string
	n                     int
	size                  int64
	sessions, calls       int
	table                 []row
	rows                  []string // measured; nil: all
	workspace, state, dir string
}

// row is one line of the table. ok is nil for a row without a target.
type row struct {
	backend, what, ours, ref, result, target string
	ok                                       *bool
}

func (b *bench) add(r row) { b.table = append(b.table, r) }

func check(ok bool) *bool { return &ok }

// print writes the table and returns the rows that missed their targets.
func (b *bench) print(w io.Writer) []string {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "backend\twhat\tsandbash\treference\tresult\ttarget\t")
	var missed []string
	for _, r := range b.table {
		status := ""
		if r.ok != nil {
			status = "ok"
			if !*r.ok {
				status = "MISSED"
				missed = append(missed, r.backend+" "+r.what)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.backend, r.what, r.ours, r.ref, r.result, r.target, status)
	}
	tw.Flush()
	return missed
}

// target is one backend: how to open it in this process, the CLI flags
// that select it, and the reference run of a command.
type target struct {
	name  string
	image string
	open  func(ctx context.Context, pool int) (backend.Backend, error)
	// ref returns the reference command running argv in the sandbox.
	ref     func(argv ...string) *exec.Cmd
	refName string
	close   func()
	// extraFlags are more CLI flags the backend needs; only, if set, the
	// rows measured ("one-shot", "warm", "concurrent"); left, if set,
	// what the backend still holds (else its engine's CLI lists it).
	extraFlags []string
	only       []string
	left       func() []string
}

func (t *target) flags() []string {
	f := []string{"--backend", t.name}
	if t.image != "" {
		f = append(f, "--image", t.image)
	}
	return append(f, t.extraFlags...)
}

func (t *target) container() bool { return t.name != "bwrap" }

// extraTargets are the backends of builds with more tags (podman.go).
var extraTargets = map[string]func(ctx context.Context, image string) (*target, error){}

func (b *bench) target(name, image string) (*target, error) {
	ctx := context.Background()
	if b.workspace == "" {
		var err error
		if b.dir, err = os.MkdirTemp("", "sbbench-"); err != nil {
			return nil, err
		}
		b.workspace = filepath.Join(b.dir, "ws")
		b.state = filepath.Join(b.dir, "state")
		for _, d := range []string{b.workspace, b.state, filepath.Join(b.dir, "tmp"), filepath.Join(b.dir, "home")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
	}
	switch name {
	case "kubernetes":
		return b.kubeTarget(ctx, image)
	case "bwrap":
		if _, err := bwrap.New(); err != nil {
			return nil, err
		}
		args := plainBwrapArgs(b.workspace, filepath.Join(b.dir, "tmp"), filepath.Join(b.dir, "home"))
		return &target{
			name: "bwrap",
			open: func(context.Context, int) (backend.Backend, error) { return bwrap.New() },
			ref: func(argv ...string) *exec.Cmd {
				return exec.Command("bwrap", append(append(slices.Clone(args), "bash", "-c"), strings.Join(argv, " "))...)
			},
			refName: "bwrap --unshare-all ... bash -c",
			close:   func() {},
		}, nil
	case "docker":
		d, err := docker.New(ctx)
		if err != nil {
			return nil, err
		}
		d.Close()
		return &target{
			name: "docker", image: image,
			open: func(ctx context.Context, pool int) (backend.Backend, error) {
				return docker.New(ctx, docker.WithPoolSize(pool))
			},
			ref: func(argv ...string) *exec.Cmd {
				return exec.Command("docker", append([]string{"run", "--rm", "--network", "none", image}, argv...)...)
			},
			refName: "docker run --rm --network none",
			close:   func() {},
		}, nil
	}
	if f, ok := extraTargets[name]; ok {
		return f(ctx, image)
	}
	return nil, errors.New("this build does not have it (podman needs the podman build tags)")
}

// plainBwrapArgs are a bwrap sandbox with the mounts sandbash gives a call
// (backend/bwrap's sandboxArgs), without sandbash's seccomp filter,
// cgroups, rlimits and launcher.
func plainBwrapArgs(ws, tmp, home string) []string {
	a := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbash", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"} {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(d); err == nil {
				a = append(a, "--symlink", t, d)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--remount-ro", "/dev", "--dir", "/etc")
	for _, e := range []string{"ssl", "ca-certificates", "resolv.conf", "nsswitch.conf", "hosts", "passwd", "group", "ld.so.cache"} {
		if _, err := os.Stat("/etc/" + e); err == nil {
			a = append(a, "--ro-bind", "/etc/"+e, "/etc/"+e)
		}
	}
	return append(a, "--bind", tmp, "/tmp", "--bind", home, backend.Home, "--bind", ws, ws, "--chdir", ws, "--remount-ro", "/")
}

// sandbash returns the CLI run with args, its state under the bench's
// directory.
func (b *bench) sandbash(args ...string) *exec.Cmd {
	c := exec.Command(b.bin, args...)
	c.Dir = b.workspace
	c.Env = append(os.Environ(), "XDG_STATE_HOME="+b.state)
	return c
}

// rowNames are the rows measure knows, in its order.
var rowNames = []string{"throughput", "one-shot", "warm", "back-to-back", "concurrent"}

func (b *bench) measure(t *target) error {
	var errs []error
	for _, m := range []struct {
		name string
		f    func(*target) error
	}{{"throughput", b.throughput}, {"one-shot", b.oneShot}, {"warm", b.inProcess}, {"back-to-back", b.backToBack}, {"concurrent", b.concurrent}} {
		if t.only != nil && !slices.Contains(t.only, m.name) || b.rows != nil && !slices.Contains(b.rows, m.name) {
			continue
		}
		if err := m.f(t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// timed runs c with stdout to out and returns how long it took.
func timed(c *exec.Cmd, out io.Writer) (time.Duration, error) {
	d, _, err := run(c, out, false)
	return d, err
}

// run runs c with stdout to out and returns how long it took and, with
// peak, its peak RSS: the high-water mark of its own address space
// (VmHWM), read from /proc every millisecond while it runs, the last read
// as late as the process lets. Not wait4's ru_maxrss: at exec the kernel
// folds the address space a process leaves into it, and Go starts
// children with vfork, whose address space is this process's, so a
// child's ru_maxrss is never below this benchmark's own peak (its binary
// links every backend: 45-65 MB), whatever the child uses.
func run(c *exec.Cmd, out io.Writer, peak bool) (time.Duration, int64, error) {
	var stderr bytes.Buffer
	c.Stdout, c.Stderr = out, &stderr
	start := time.Now()
	err := c.Start()
	var hwm int64
	sampled := make(chan struct{})
	done := make(chan struct{})
	if err == nil && peak {
		// The process's own /proc directory: once it is gone, reads
		// through it fail rather than reach a process that reused its
		// PID.
		dir, derr := os.Open("/proc/" + strconv.Itoa(c.Process.Pid))
		if derr != nil {
			close(sampled)
		} else {
			go func() {
				defer close(sampled)
				defer dir.Close()
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					if v := vmHWM(dir); v > hwm {
						hwm = v
					}
					select {
					case <-done:
						return
					case <-tick.C:
					}
				}
			}()
		}
	} else {
		close(sampled)
	}
	if err == nil {
		err = c.Wait()
	}
	d := time.Since(start)
	close(done)
	<-sampled
	if err != nil {
		return d, 0, fmt.Errorf("%s: %v: %s", strings.Join(c.Args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	if peak && hwm == 0 {
		return d, 0, fmt.Errorf("%s: could not read its peak RSS (VmHWM) from /proc", strings.Join(c.Args, " "))
	}
	return d, hwm, nil
}

// vmHWM is the VmHWM of the process whose /proc directory dir is, in
// bytes; 0 if it cannot be read (the process is gone).
func vmHWM(dir *os.File) int64 {
	fd, err := unix.Openat(int(dir.Fd()), "status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	f := os.NewFile(uintptr(fd), "status")
	defer f.Close()
	b, _ := io.ReadAll(f)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// throughput writes the output with dd in 64 KiB blocks: the test images'
// head is busybox's, which alone makes 1 GiB in 5 to 10 s here, in a
// container or not; the row is about the path the output takes.
func (b *bench) throughput(t *target) error {
	if b.size%(64<<10) != 0 {
		return fmt.Errorf("throughput: -bytes %d is not a multiple of 64 KiB", b.size)
	}
	cmd := []string{"dd", "if=/dev/zero", "bs=64k", "count=" + strconv.FormatInt(b.size/(64<<10), 10), "status=none"}
	var js bytes.Buffer
	d, rss, err := run(b.sandbash(append(append(append([]string{"run", "--json"}, t.flags()...), "--"), cmd...)...), &js, true)
	if err != nil {
		return fmt.Errorf("throughput: %w", err)
	}
	var res struct {
		ExitCode    *int   `json:"exit_code"`
		OutputBytes int64  `json:"output_bytes"`
		SpillPath   string `json:"spill_path"`
	}
	if err := json.Unmarshal(js.Bytes(), &res); err != nil {
		return fmt.Errorf("throughput: sandbash run --json: %v", err)
	}
	if res.SpillPath != "" {
		os.Remove(res.SpillPath)
	}
	if res.ExitCode == nil || *res.ExitCode != 0 || res.OutputBytes != b.size {
		return fmt.Errorf("throughput: sandbash run --json: exit %v, %d bytes of output, want 0 and %d", res.ExitCode, res.OutputBytes, b.size)
	}
	var cnt counter
	rd, err := timed(t.ref(cmd...), &cnt)
	if err != nil {
		return fmt.Errorf("throughput reference: %w", err)
	}
	tp := float64(b.size) / d.Seconds()
	b.add(row{t.name, fmt.Sprintf("%s of output (dd), one call, --json", units(b.size)), round(d), round(rd) + " " + t.refName,
		fmt.Sprintf("%.0f MB/s", tp/1e6), fmt.Sprintf(">= %.0f MB/s", minThroughput/1e6), check(tp >= minThroughput)})
	b.add(row{t.name, "peak RSS of that run", fmt.Sprintf("%.1f MiB", float64(rss)/(1<<20)), "", "", fmt.Sprintf("< %d MiB", maxRSS>>20), check(rss < maxRSS)})
	return nil
}

func units(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

func round(d time.Duration) string {
	if d >= time.Second {
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

// oneShot: the whole `sandbash run -- true` process vs the reference,
// interleaved, medians.
func (b *bench) oneShot(t *target) error {
	var ours, ref []time.Duration
	if _, err := timed(t.ref("true"), io.Discard); err != nil {
		return fmt.Errorf("one-shot reference: %w", err)
	}
	for range b.n {
		d, err := timed(b.sandbash(append(append([]string{"run"}, t.flags()...), "--", "true")...), io.Discard)
		if err != nil {
			return fmt.Errorf("one-shot: %w", err)
		}
		ours = append(ours, d)
		if d, err = timed(t.ref("true"), io.Discard); err != nil {
			return fmt.Errorf("one-shot reference: %w", err)
		}
		ref = append(ref, d)
	}
	limit := maxOneShotCtr
	switch {
	case !t.container():
		limit = maxOneShotBwr
	case t.name == "kubernetes":
		limit = 0 // no target: a measure of pod start against kubectl's
	}
	b.ratioRow(t, "one-shot `sandbash run -- true`", ours, ref, limit)
	return nil
}

func (b *bench) ratioRow(t *target, what string, ours, ref []time.Duration, limit float64) {
	mo, mr := median(ours), median(ref)
	r := float64(mo) / float64(mr)
	if limit == 0 {
		b.add(row{t.name, what, round(mo), round(mr) + " " + t.refName, fmt.Sprintf("%.3fx", r), "", nil})
		return
	}
	b.add(row{t.name, what, round(mo), round(mr) + " " + t.refName, fmt.Sprintf("%.3fx", r), fmt.Sprintf("<= %gx", limit), check(r <= limit)})
}

func (b *bench) config() sandbash.Config {
	return sandbash.Config{Workspace: b.workspace, ParentDir: filepath.Join(b.dir, "sessions")}
}

// inProcess: on bwrap, Session.Run("true") vs a plain bwrap; on a
// container backend, a warm call (the pool refilled) vs the CLI.
func (b *bench) inProcess(t *target) error {
	ctx := context.Background()
	be, err := t.open(ctx, 1)
	if err != nil {
		return err
	}
	defer closeBackend(be)
	cfg := b.config()
	cfg.Image = t.image
	s, err := sandbash.Open(ctx, be, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	var ours, ref []time.Duration
	for range b.n {
		if t.container() {
			// Agents think between calls; the pool refills meanwhile.
			if err := s.WaitWarm(ctx); err != nil {
				return err
			}
		}
		start := time.Now()
		if err := call(ctx, s); err != nil {
			return err
		}
		ours = append(ours, time.Since(start))
		d, err := timed(t.ref("true"), io.Discard)
		if err != nil {
			return err
		}
		ref = append(ref, d)
	}
	if t.container() {
		b.ratioRow(t, "warm call (pool refilled)", ours, ref, maxWarm)
	} else {
		b.ratioRow(t, "in-process Session.Run(\"true\")", ours, ref, maxInProcBwrap)
	}
	return nil
}

func closeBackend(b backend.Backend) {
	if c, ok := b.(io.Closer); ok {
		c.Close()
	}
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

// backToBack: n `bash` tool calls with no pause through one `sandbash mcp`
// connection (timed from the first call to the last result), vs n
// reference runs one after another.
func (b *bench) backToBack(t *target) error {
	ctx := context.Background()
	cmd := b.sandbash(append([]string{"mcp"}, t.flags()...)...)
	cmd.Stderr = io.Discard
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "sandbash-bench", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Minute}, nil)
	if err != nil {
		return fmt.Errorf("back-to-back: sandbash mcp: %w", err)
	}
	defer cs.Close()
	start := time.Now()
	for i := range b.n {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bash", Arguments: map[string]any{"command": "true"}})
		if err != nil {
			return fmt.Errorf("back-to-back: call %d: %w", i, err)
		}
		if res.IsError {
			return fmt.Errorf("back-to-back: call %d failed: %+v", i, res.Content)
		}
	}
	ours := time.Since(start)
	// The reference runs on an engine that has settled: sandbash mcp has
	// ended, and with it the session, its warm containers and the
	// removals it held back (ctrbackend.Later), which Close waits for.
	if err := cs.Close(); err != nil {
		return fmt.Errorf("back-to-back: ending sandbash mcp: %w", err)
	}
	start = time.Now()
	for range b.n {
		if _, err := timed(t.ref("true"), io.Discard); err != nil {
			return err
		}
	}
	ref := time.Since(start)
	r := float64(ours) / float64(ref)
	var ok *bool
	tgt := ""
	if t.container() {
		ok, tgt = check(r <= maxBackToBack), fmt.Sprintf("<= %gx", maxBackToBack)
	}
	b.add(row{t.name, fmt.Sprintf("%d back-to-back calls, one mcp connection", b.n), round(ours), round(ref) + fmt.Sprintf(" (%d runs)", b.n), fmt.Sprintf("%.3fx", r), tgt, ok})
	return nil
}

// concurrent: sessions x calls at once in this process; every call must
// succeed, and nothing may be left after the sessions closed.
func (b *bench) concurrent(t *target) error {
	ctx := context.Background()
	be, err := t.open(ctx, 1)
	if err != nil {
		return err
	}
	defer closeBackend(be)
	cfg := b.config()
	cfg.Image = t.image
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range b.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				s, err := sandbash.Open(ctx, be, cfg)
				if err != nil {
					return err
				}
				defer s.Close()
				for range b.calls {
					if err := call(ctx, s); err != nil {
						return err
					}
				}
				return nil
			}()
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	left := b.leftovers(t)
	ok := len(errs) == 0 && len(left) == 0
	result := fmt.Sprintf("%d/%d sessions ok, %d left over", b.sessions-len(errs), b.sessions, len(left))
	b.add(row{t.name, fmt.Sprintf("%d sessions x %d calls at once", b.sessions, b.calls), round(d), "", result, "all ok, 0 left", check(ok)})
	if len(errs) > 0 {
		return fmt.Errorf("concurrent: %w", errs[0])
	}
	if len(left) > 0 {
		return fmt.Errorf("concurrent: left over: %v", left)
	}
	return nil
}

// leftovers are this process's containers and volumes, session
// directories and mounts under the bench's directory.
func (b *bench) leftovers(t *target) []string {
	var left []string
	if t.left != nil {
		left = t.left()
	} else if t.container() {
		owner := container.Owner()
		for _, args := range [][]string{{"ps", "-aq"}, {"volume", "ls", "-q"}} {
			out, err := exec.Command(t.name, append(args, "--filter", "label="+container.LabelOwner+"="+owner)...).Output()
			if err != nil {
				left = append(left, fmt.Sprintf("%s %s: %v", t.name, args[0], err))
			}
			left = append(left, strings.Fields(string(out))...)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(b.dir, "sessions"))
	for _, e := range ents {
		left = append(left, "session directory "+e.Name())
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if strings.Contains(l, b.dir) {
			left = append(left, "mount "+l)
		}
	}
	return left
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
