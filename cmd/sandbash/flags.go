package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/docker/go-units"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
	container "github.com/sandbash/sandbash/internal/ctrbackend"
	"github.com/sandbash/sandbash/internal/hostmount"
	"github.com/sandbash/sandbash/internal/owner"
	"github.com/sandbash/sandbash/overlay"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// sessionFlags describe a session; run, mcp and session open take them. The
// JSON form is what `session open` keeps for later runs.
type sessionFlags struct {
	Backend   string     `json:"backend"`
	Workspace string     `json:"workspace"`
	Image     string     `json:"image,omitempty"`
	Network   string     `json:"network"`
	Readable  stringList `json:"readable,omitempty"`
	Writable  stringList `json:"writable,omitempty"`
	Env       stringList `json:"env,omitempty"`
	Caches    stringList `json:"caches,omitempty"`
	CacheDirs stringList `json:"cache_dirs,omitempty"`
	Memory    string     `json:"memory,omitempty"`
	CPUs      float64    `json:"cpus"`
	Pids      int64      `json:"pids"`
	Confirm   bool       `json:"confirm,omitempty"`
	Allow     stringList `json:"allow,omitempty"`
	Resolve   stringList `json:"resolve,omitempty"`
	Creds     stringList `json:"credentials,omitempty"` // HOST=HEADER:env:VAR, never a value
	EgressLog string     `json:"egress_log,omitempty"`
	CredCA    string     `json:"credential_ca,omitempty"`
	// Runtime is the container engine's OCI runtime (runsc, kata); ""
	// its default.
	Runtime string `json:"runtime,omitempty"`
	// WorkspaceMode is direct or overlay (review.go).
	WorkspaceMode string `json:"workspace_mode,omitempty"`
	// Namespace and Claim are --backend kubernetes's (kubernetes.go).
	Namespace string `json:"namespace,omitempty"`
	Claim     string `json:"claim,omitempty"`

	limitsGiven string // the limit flags given on the command line
	// opened is the image a CLI session opened with: its runs use it and
	// never look at --image, SANDBASH_IMAGE or devcontainer.json again.
	opened *imageChoice
}

func (f *sessionFlags) register(fs *flag.FlagSet) {
	def := container.DefaultLimits()
	fs.StringVar(&f.Backend, "backend", "auto", "sandbox backend: auto, bwrap, docker, podman or kubernetes (auto never picks kubernetes; a container backend when an image is configured and its daemon answers, else bwrap)")
	fs.StringVar(&f.Workspace, "workspace", "", "project directory, mounted read-write (default: the current directory)")
	fs.StringVar(&f.Image, "image", "", "container image for docker/podman (default: $SANDBASH_IMAGE, else \"image\" in the workspace's .devcontainer/devcontainer.json, once approved with sandbash trust)")
	fs.StringVar(&f.Network, "network", "none", "network: none (only the sandbox's own loopback) or on")
	fs.Var(&f.Readable, "readable", "extra host `PATH` to mount read-only (repeatable)")
	fs.Var(&f.Writable, "writable", "extra host `PATH` to mount read-write (repeatable)")
	fs.Var(&f.Env, "env", "pass `NAME` from this environment, or set NAME=VALUE (repeatable); not PATH, LD_*, BASH_ENV and others that change how bash or the linker start: set those inside the command")
	fs.Var(&f.Caches, "cache", "share a dependency cache copy-on-write: gradle, maven, cargo, go, npm, pip, or all (repeatable); the host's cache is read-only, writes stay in the session")
	fs.Var(&f.CacheDirs, "cache-dir", "share any host directory copy-on-write: `HOST:SANDBOX` (repeatable)")
	fs.StringVar(&f.Memory, "memory", "", "memory limit of each call, tmpfs included, e.g. 512m or 8g (default 4g)")
	fs.Float64Var(&f.CPUs, "cpus", def.CPUs, "CPU limit of each call, fractional (bwrap: only where it can use the cpu cgroup)")
	fs.Int64Var(&f.Pids, "pids", def.Pids, "most processes and threads of each call at once")
	fs.Var(&f.Allow, "allow", "turn on the egress proxy and let calls reach `DEST` through it: host, *.domain, host:port, an IP or a CIDR; without a port, 80 and 443 (repeatable). Nothing else is reachable, and metadata addresses never are")
	fs.Var(&f.Resolve, "resolve", "pin `NAME=IP` for the egress proxy, like curl --resolve (repeatable); a pinned private address is allowed")
	fs.Var(&f.Creds, "credential", "have the egress proxy add a header to requests to a host: `HOST=HEADER:env:VAR` adds \"HEADER: $VAR\", read here; the value never enters the sandbox (repeatable)")
	fs.StringVar(&f.CredCA, "credential-ca", "", "also trust the PEM certificates in `FILE` when the egress proxy connects to a --credential host over TLS (an internal CA)")
	fs.StringVar(&f.EgressLog, "egress-log", "", "append one JSON line per egress connection attempt to `FILE`")
	fs.BoolVar(&f.Confirm, "confirm", false, "ask before every command runs (run: y/n on the terminal; mcp: through the client, by elicitation)")
	fs.StringVar(&f.Runtime, "runtime", "", "docker/podman: run the calls' containers under the engine's OCI runtime `NAME` (runsc for gVisor, kata), as registered with the engine; egress rules are refused under it")
	fs.StringVar(&f.Namespace, "namespace", "", "kubernetes: the `NAMESPACE` of the calls' pods (default: the kubeconfig context's, or, in a pod, its own)")
	fs.StringVar(&f.Claim, "claim", "", "kubernetes: the PersistentVolumeClaim holding the workspace, as `NAME:ROOT` (ROOT: where sandbash sees the claim's root), or ROOT alone when sandbash runs in a pod that mounts the claim there; in a pod, without it, the claim the pod mounts where the workspace is")
	fs.StringVar(&f.WorkspaceMode, "workspace-mode", string(sandbash.WorkspaceDirect), "direct: calls write the workspace; overlay: they write the session's own layer, and the workspace changes only when you apply (sandbash session diff|apply|reset|checkpoint|restore)")
}

// parsed records what was given on the command line and checks the values
// that need no backend. Call it after fs.Parse.
func (f *sessionFlags) parsed(fs *flag.FlagSet) error {
	var given []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "memory", "cpus", "pids":
			given = append(given, "--"+fl.Name)
		}
	})
	f.limitsGiven = strings.Join(given, ", ")
	if err := sandbash.CheckNetwork(backend.Network(f.Network)); err != nil {
		return err
	}
	if err := sandbash.CheckEnv(f.Env); err != nil {
		return err
	}
	if err := sandbash.CheckWorkspaceMode(sandbash.WorkspaceMode(f.WorkspaceMode)); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "sandbash: ") + " (--workspace-mode)")
	}
	if f.Workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return fmt.Errorf("cannot find the current directory (%v); give --workspace", err)
		}
		f.Workspace = wd
	}
	_, err := f.limits()
	return err
}

func (f *sessionFlags) limits() (container.Limits, error) {
	l := container.DefaultLimits()
	if f.Memory != "" {
		m, err := units.RAMInBytes(f.Memory)
		if err != nil {
			return l, fmt.Errorf("--memory %q: give a size such as 512m or 8g", f.Memory)
		}
		l.Memory = m
	}
	l.CPUs, l.Pids = f.CPUs, f.Pids
	return l, l.Validate()
}

// prepared is a backend and a session configuration, ready for Open.
type prepared struct {
	b       backend.Backend
	cfg     sandbash.Config
	image   imageChoice // cfg.Image, and where it came from
	confirm bool        // the session asks before every command
	logFile *os.File    // --egress-log, closed with p
	// reap starts the sweep of what dead sandbash processes left
	// (prepare), once; gc is closed when it is done.
	reap func()
	gc   chan struct{}
}

// image is the session's image: the one it opened with, or else --image,
// SANDBASH_IMAGE, or the approved devcontainer.json, read now.
func (f *sessionFlags) image() (imageChoice, error) {
	if f.opened != nil {
		return *f.opened, nil
	}
	return resolveImage(f.Image, os.Getenv("SANDBASH_IMAGE"), f.Workspace, f.Backend)
}

// checkImage refuses an image that only workspace content names when it is
// not on this machine: the backend would pull it, and the pull alone
// reaches a registry the workspace chose (even under --network none) and
// fetches a userland it chose. --image and SANDBASH_IMAGE may be pulled.
func (p *prepared) checkImage(ctx context.Context) error {
	if !p.image.Workspace || p.image.Ref == "" {
		return nil
	}
	ref := p.image.Ref
	hc, ok := p.b.(backend.ImageRunner)
	if !ok {
		return fmt.Errorf("%s cannot tell whether image %s is on this machine without pulling it; give it with --image", p.b.Name(), ref)
	}
	here, err := hc.HasImage(ctx, ref)
	if err != nil {
		return err
	}
	if !here {
		return fmt.Errorf("image %s, named by %s, is not on this machine, and sandbash does not pull an image that only workspace content names: if you trust it, pull it yourself (%s pull %s), or give it with --image %s (which lets sandbash pull it)",
			ref, p.image.Source, p.b.Name(), ref, ref)
	}
	return nil
}

// open opens a session of p. An image only the workspace names is checked
// again first: the backend would pull it if it had gone since.
func (p *prepared) open(ctx context.Context, cfg sandbash.Config) (*sandbash.Session, error) {
	if err := p.checkImage(ctx); err != nil {
		return nil, err
	}
	return sandbash.Open(ctx, p.b, cfg)
}

// close releases the backend once the background gc is done (started
// now if nothing started it).
func (p *prepared) close() {
	if p.reap != nil {
		p.reap()
		<-p.gc
	}
	if p.logFile != nil {
		p.logFile.Close()
	}
	p.b.Close()
}

// prepare picks the backend and builds the session's configuration.
// oneShot sessions keep nothing warm, and their caller starts the sweep of
// what dead sandbash processes left (p.reap) when it suits it: run, once
// its call is under way, when sandbash only waits for it; close starts it
// otherwise. Other sessions start it here.
func (f *sessionFlags) prepare(ctx context.Context, stderr io.Writer, oneShot bool) (*prepared, error) {
	sandbash.Prepare(f.Workspace) // meanwhile
	limits, err := f.limits()
	if err != nil {
		return nil, err
	}
	img, err := f.image()
	if err != nil {
		return nil, err
	}
	b, err := pickBackend(ctx, f.Backend, img, containerOptions{limits: limits, progress: stderr, oneShot: oneShot, runtime: f.Runtime, namespace: f.Namespace, claim: f.Claim, workspace: f.Workspace}, stderr)
	if err != nil {
		return nil, err
	}
	p := &prepared{b: b, confirm: f.Confirm}
	if _, ok := b.(backend.ImageRunner); ok {
		p.image = img
	}
	if bw, ok := b.(*bwrap.Backend); ok {
		e := bw.Enforcement()
		if strings.Contains(f.limitsGiven, "--cpus") && !e.CPU {
			p.close()
			return nil, fmt.Errorf("--cpus: bwrap cannot limit CPU here, it has no cpu cgroup to use (%s); drop --cpus, run sandbash as root or in a delegated cgroup v2 scope, or pick --backend docker or podman", e.Summary)
		}
		if !e.Memory || !e.Pids {
			// Say what holds, rather than let the flags suggest more.
			fmt.Fprintf(stderr, "sandbash: bwrap limits: %s\n", e.Summary)
		}
	}
	if b.Name() == "kubernetes" && strings.Contains(f.limitsGiven, "--pids") {
		p.close()
		return nil, errors.New("--pids: a pod's process limit is its node's (the kubelet's podPidsLimit), which a pod spec cannot set, so sandbash cannot give a session its own on Kubernetes; drop --pids (sandbash doctor says which limit applies), or pick --backend docker or podman")
	}
	if e, ok := podmanEnforcement(b); ok {
		if strings.Contains(f.limitsGiven, "--cpus") && !e.CPU {
			p.close()
			return nil, fmt.Errorf("--cpus: this rootless Podman service cannot limit CPU (%s); drop --cpus, or pick --backend docker or root's Podman service", e.Summary)
		}
		if !e.Memory || !e.Pids {
			fmt.Fprintf(stderr, "sandbash: podman limits: %s\n", e.Summary)
		}
	}
	if err := p.checkImage(ctx); err != nil {
		p.close()
		return nil, err
	}
	home, _ := os.UserHomeDir()
	caches, err := overlay.Resolve(f.Caches, f.CacheDirs, home, overlay.HostGoEnv)
	if err != nil {
		p.close()
		return nil, err
	}
	base, err := stateBase()
	if err != nil {
		p.close()
		return nil, err
	}
	p.cfg = sandbash.Config{
		ParentDir: filepath.Join(base, "runs"),
		Workspace: f.Workspace,
		Readable:  f.Readable,
		Writable:  f.Writable,
		Network:   backend.Network(f.Network),
		Env:       f.Env,
		Image:     p.image.Ref,
		Caches:    caches,

		WorkspaceMode: sandbash.WorkspaceMode(f.WorkspaceMode),
	}
	if len(f.Allow)+len(f.Resolve)+len(f.Creds) > 0 || f.EgressLog != "" || f.CredCA != "" {
		e := &sandbash.Egress{Allow: f.Allow, Resolve: f.Resolve, Credentials: f.Creds}
		if f.CredCA != "" {
			pem, err := os.ReadFile(f.CredCA)
			if err != nil {
				p.close()
				return nil, fmt.Errorf("--credential-ca: %w", err)
			}
			e.UpstreamCAs = pem
		}
		// Checked before the log is created: bad input changes nothing.
		if err := sandbash.CheckEgress(e, backend.Network(f.Network)); err != nil {
			p.close()
			return nil, err
		}
		if f.EgressLog != "" {
			if len(f.Allow) == 0 {
				p.close()
				return nil, fmt.Errorf("--egress-log: the log is the egress proxy's, which --allow turns on; add --allow rules")
			}
			lf, err := openEgressLog(f.EgressLog, append([]string{f.Workspace}, f.Writable...))
			if err != nil {
				p.close()
				return nil, fmt.Errorf("--egress-log: %w", err)
			}
			e.Log = lf
			p.logFile = lf
		}
		p.cfg.Egress = e
	}
	// Reap what sandbash processes that died left behind, alongside.
	gc, ok := b.(backend.Collector)
	p.gc = make(chan struct{})
	p.reap = sync.OnceFunc(func() {
		go func() {
			defer close(p.gc)
			if ok {
				_, _ = gc.GC(ctx, false)
			}
			if os.Geteuid() == 0 {
				_, _ = hostmount.Sweep(owner.Gone)
			}
			_, _ = sandbash.SweepDirs(p.cfg.ParentDir)
		}()
	})
	if !oneShot {
		p.reap()
	}
	return p, nil
}

// openEgressLog opens the egress log for appending. sandbash (root, with
// egress rules) opens it anew at every run, so it must not lie where calls
// write (the workspace, a --writable path): a call could replace it with a
// symlink to any host file, which the next run would append lines to that
// the call partly wrote (the names it asked for), or rewrite the record of
// what it did. It is never opened through a symlink either.
func openEgressLog(path string, writable []string) (*os.File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return nil, err
	}
	for _, w := range writable {
		real, err := filepath.EvalSymlinks(w)
		if err != nil {
			real, _ = filepath.Abs(w)
		}
		if dir == real || strings.HasPrefix(dir, strings.TrimSuffix(real, "/")+"/") {
			return nil, fmt.Errorf("%s lies in %s, which the sandboxed commands can write: they could replace the log with a symlink to another file, which sandbash would then write to, or rewrite it; keep the log outside the workspace and the --writable paths", path, w)
		}
	}
	lf, err := os.OpenFile(filepath.Join(dir, filepath.Base(abs)), os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symlink; name the file itself", path)
	}
	return lf, err
}

// parseFlags parses args into fs, printing usage on -h; it returns false
// with the exit status when the command should stop.
func parseFlags(fs *flag.FlagSet, args []string) (bool, int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, 0
		}
		return false, exitFailed
	}
	return true, 0
}
