package backendtest

import (
	"bufio"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandbash/sandbash"
	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/hostmount"
)

// The suite runs as root and as a normal user (make test-user). Where a
// promise is root's alone (mapping a root-owned workspace, staging mounts,
// making each call's network namespace), a test run as a user checks what
// the user gets instead: the refusal, and that it says why and what to do.
// Nothing skips.

// asUser reports whether the suite runs as a user other than root.
func asUser() bool { return os.Geteuid() != 0 }

// refusedAsUser checks that Open with cfg is refused, as unavailable to
// this user, with a message that says it needs root and names each of
// want.
func (f *fixture) refusedAsUser(cfg sandbash.Config, want ...string) {
	f.t.Helper()
	if cfg.Workspace == "" {
		cfg.Workspace = f.dir("ws-refused")
	}
	if cfg.Image == "" {
		cfg.Image = f.caps.Image
	}
	s, err := sandbash.Open(f.ctx, f.b, cfg)
	if err == nil {
		s.Close()
		f.t.Fatalf("as uid %d, Open accepted what needs root here (%+v)", os.Geteuid(), cfg)
	}
	for _, w := range append([]string{"root"}, want...) {
		if !strings.Contains(err.Error(), w) {
			f.t.Errorf("as uid %d, the refusal %q does not say %q", os.Geteuid(), err, w)
		}
	}
}

// rootWorkspaceAsUser is what a user gets for a workspace that belongs to
// root (a tests' case that only root can set up): on a container backend
// Open refuses it, saying that calls run as the workspace owner and to run
// sandbash as root; on bwrap the calls run as the user, whom the
// workspace does not let write, and no process of a call holds host root.
func (f *fixture) rootWorkspaceAsUser() {
	f.t.Helper()
	ws := rootOwnedDir(f)
	if f.caps.Image != "" {
		s, err := sandbash.Open(f.ctx, f.b, sandbash.Config{Workspace: ws, Image: f.caps.Image})
		if err == nil {
			s.Close()
			f.t.Fatalf("as uid %d, Open accepted root's workspace %s", os.Geteuid(), ws)
		}
		if !errors.Is(err, sandbash.ErrOtherOwner) || !strings.Contains(err.Error(), "run sandbash as uid 0, or as root") {
			f.t.Errorf("as uid %d, Open with root's workspace %s: %v; want ErrOtherOwner saying to run sandbash as root", os.Geteuid(), ws, err)
		}
		return
	}
	s := f.open(sandbash.Config{Workspace: ws})
	mark := marker()
	stop := f.startLong(s, "bash -c 'echo started; sleep 60; :' "+mark)
	procs := processesWith(mark)
	if len(procs) == 0 {
		f.t.Error("no process of the call found on the host")
	}
	for _, p := range procs {
		pid, _, _ := strings.Cut(p, ":")
		if uids := statusField(pid, "Uid:"); slices.Contains(uids, "0") || len(uids) == 0 {
			f.t.Errorf("a process of the call (pid %s) holds host uids %v; want only %d", pid, uids, os.Geteuid())
		}
	}
	stop()
	f.expect(s, "id -u; touch sandbash-root-ws-probe 2>/dev/null || echo refused", 0, strconv.Itoa(os.Geteuid())+"\nrefused\n")
}

// rootOwnedDir is a directory root owns that a user may read and the
// mount policy accepts as a workspace.
func rootOwnedDir(f *fixture) string {
	for _, d := range []string{"/srv", "/usr/local", "/var/local"} {
		if uid, _, err := ownerOf(d); err == nil && uid == 0 {
			return d
		}
	}
	f.t.Fatal("no root-owned directory here to try as a workspace (/srv, /usr/local, /var/local)")
	return ""
}

func ownerOf(p string) (int, int, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return 0, 0, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), nil
}

// hostAddr is the host's IPv4 address on its default route: what a
// sandbox with the network on reaches (the network tests' test host needs
// root to make), and one with the network off must not.
func hostAddr(f *fixture) string {
	f.t.Helper()
	rt, err := os.Open("/proc/net/route")
	if err != nil {
		f.t.Fatal(err)
	}
	defer rt.Close()
	sc := bufio.NewScanner(rt)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 || fs[1] != "00000000" {
			continue
		}
		ifc, err := net.InterfaceByName(fs[0])
		if err != nil {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	f.t.Fatal("no IPv4 address on the host's default route to listen on")
	return ""
}

// stagesNothingAsUser: a user's sandbash stages no mount (only root can):
// a session in a directory closed to others opens, its calls reach it, and
// nothing of it appears under the staging root.
func stagesNothingAsUser(f *fixture) {
	private := filepath.Join(f.base, "private")
	ws := filepath.Join(private, "ws")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.Chmod(private, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "file"), []byte("private\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	s := f.open(sandbash.Config{Workspace: ws})
	f.expect(s, "cat file", 0, "private\n")
	if m := stagedFor(s.ID()); len(m) > 0 {
		f.t.Errorf("as uid %d, mounts were staged: %v", os.Geteuid(), m)
	}
	if _, err := os.Lstat(filepath.Join(hostmount.Root, s.ID())); !errors.Is(err, fs.ErrNotExist) {
		f.t.Errorf("as uid %d, the session has a staging directory %s: %v", os.Geteuid(), filepath.Join(hostmount.Root, s.ID()), err)
	}
}

// SubmountEnv names, for a run as a user, a workspace of the user's with a
// tmpfs mounted at sub (holding the file mounted, "on the submount", over
// a file covered): only root mounts, so make test-user makes it.
const SubmountEnv = "SANDBASH_TEST_SUBMOUNT"

// submountAsUser is testSubmounts for a user: the workspace root made.
func submountAsUser(f *fixture) {
	ws := os.Getenv(SubmountEnv)
	if ws == "" {
		f.t.Fatalf("as a user, this test needs a workspace with a submount that root made: set %s to it (make test-user does)", SubmountEnv)
	}
	s := f.open(sandbash.Config{Workspace: ws})
	f.t.Cleanup(func() { os.Remove(filepath.Join(ws, "sub", "new")) })
	f.expect(s, "ls sub; cat sub/*; echo new > sub/new", 0, "mounted\non the submount\n")
	if b, err := os.ReadFile(filepath.Join(ws, "sub", "new")); err != nil || string(b) != "new\n" {
		f.t.Errorf("a file written to the submount: host sees %q, %v", b, err)
	}
}

// networkAsUser is testNetwork for a user, who cannot make the test host:
// the positive control is the host's own address on its default route,
// which a sandbox with the network on reaches (through the engine's NAT)
// and one with it off does not; neither reaches the host's loopback or
// lists its abstract sockets. Where the network on needs root, Open
// refuses it, saying so.
func networkAsUser(f *fixture) {
	none := f.open(sandbash.Config{})
	var on *sandbash.Session
	onCfg := sandbash.Config{Workspace: f.dir("ws-on"), Network: backend.NetworkOn}
	if f.caps.NetworkNeedsRoot {
		f.refusedAsUser(onCfg, "network namespace")
	} else {
		on = f.open(onCfg)
	}
	targets := []netTarget{{"127.0.0.1", false}, {hostAddr(f), true}}
	if f.caps.BridgeGateway != "" && on != nil {
		if err := on.WaitWarm(f.ctx); err != nil {
			f.t.Fatal(err)
		}
		targets = append(targets, netTarget{f.caps.BridgeGateway, true})
	}
	probeListeners(f, none, on, targets)
	noHostAbstractSockets(f, none, on)
}
