package sandbash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
)

func TestEscapeCommand(t *testing.T) {
	cases := map[string]string{
		"ls -la":                 "ls -la",
		"echo safe\rrm -rf ~":    `echo safe\rrm -rf ~`,
		"evil\x1b[2K\x1b[1Agood": `evil\x1b[2K\x1b[1Agood`,
		"multi\nline\tok":        "multi\nline\tok",
		"bad \xff byte":          `bad \xff byte`,
		"bidi \u202egnp.exe":     `bidi \u202egnp.exe`,
		"zero\u200bwidth":        `zero\u200bwidth`,
		"c1 \u009b control":      `c1 \u009b control`,
		"del\x7f bell\a":         `del\x7f bell\x07`,
		"unicode é 日本 is fine":   "unicode é 日本 is fine",
	}
	for in, want := range cases {
		if got := EscapeCommand(in); got != want {
			t.Errorf("EscapeCommand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildEnv(t *testing.T) {
	host := map[string]string{"GOFLAGS": "-mod=mod", "SECRET": "no"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	env, err := buildEnv([]string{"GOFLAGS", "A=1", "TERM=xterm", "A=2"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=" + basePath, "HOME=/home/sandbash", "LANG=C.UTF-8", "TERM=xterm", "GOFLAGS=-mod=mod", "A=2"}
	if !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	for _, bad := range []string{"UNSET_HERE", "1X=2", "A-B=3", "=x", "N=a\x00b"} {
		if _, err := buildEnv([]string{bad}, lookup); !errors.Is(err, ErrBadEnv) {
			t.Errorf("buildEnv(%q) = %v, want ErrBadEnv", bad, err)
		}
	}
}

// TestWithout: the status Run makes up replaces only the backend's "no
// exit status", not what else the backend reported with it.
func TestWithout(t *testing.T) {
	noStatus := fmt.Errorf("x: %w", backend.ErrNoExitStatus)
	cleanup := errors.New("removing the call's cgroup failed")
	if err := without(noStatus, backend.ErrNoExitStatus); err != nil {
		t.Errorf("without(no status) = %v, want nil", err)
	}
	if err := without(errors.Join(noStatus, cleanup), backend.ErrNoExitStatus); err == nil || err.Error() != cleanup.Error() {
		t.Errorf("without(no status + cleanup) = %v, want the cleanup error alone", err)
	}
	if err := without(errors.Join(noStatus, nil), backend.ErrNoExitStatus); err != nil {
		t.Errorf("without(join(no status, nil)) = %v, want nil", err)
	}
}

// TestNetworkCheckedFirst: an unknown network policy is refused before
// Open creates anything: no session directory, no cache layer.
func TestNetworkCheckedFirst(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "sessions")
	_, err := Open(context.Background(), nil, Config{Workspace: t.TempDir(), Network: "bridge", ParentDir: parent})
	if !errors.Is(err, ErrBadNetwork) {
		t.Errorf("Open with network bridge: %v, want ErrBadNetwork", err)
	}
	if _, err := os.Stat(parent); err == nil {
		t.Errorf("Open created %s before refusing the network", parent)
	}
}

// TestResolveEnv: what a CLI session fixes when it opens is what Open
// would pass: names copied from here, the same refusals.
func TestResolveEnv(t *testing.T) {
	t.Setenv("SANDBASH_RESOLVE_TEST", "from here")
	got, err := ResolveEnv([]string{"SANDBASH_RESOLVE_TEST", "A=1"})
	if want := []string{"SANDBASH_RESOLVE_TEST=from here", "A=1"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ResolveEnv = %q, %v; want %q", got, err, want)
	}
	os.Unsetenv("SANDBASH_RESOLVE_TEST")
	if _, err := ResolveEnv([]string{"SANDBASH_RESOLVE_TEST"}); !errors.Is(err, ErrBadEnv) {
		t.Errorf("ResolveEnv of an unset name = %v, want ErrBadEnv", err)
	}
	if _, err := ResolveEnv([]string{"LD_PRELOAD=/x.so"}); !errors.Is(err, ErrUnsafeEnv) {
		t.Errorf("ResolveEnv(LD_PRELOAD) = %v, want ErrUnsafeEnv", err)
	}
}

// TestDangerousEnvRefused: variables that change how bash or the dynamic
// linker start cannot be passed, in any form: NAME=VALUE, NAME copied from
// here, another case, through Open.
func TestDangerousEnvRefused(t *testing.T) {
	host := map[string]string{"LD_PRELOAD": "/tmp/evil.so", "PATH": "/tmp/evil:/bin", "BASH_ENV": "/tmp/x"}
	lookup := func(k string) (string, bool) { v, ok := host[k]; return v, ok }
	names := []string{
		"PATH", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "BASH_XTRACEFD", "PS4", "PROMPT_COMMAND",
		"IFS", "CDPATH", "GLOBIGNORE", "BASH_FUNC_ls", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT",
		"LD_BIND_NOW", "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH",
	}
	for _, n := range names {
		for _, e := range []string{n + "=/tmp/x", strings.ToLower(n) + "=/tmp/x", n + "="} {
			if _, err := buildEnv([]string{e}, lookup); !errors.Is(err, ErrUnsafeEnv) || !strings.Contains(err.Error(), "inside the command") {
				t.Errorf("buildEnv(%q) = %v, want a refusal wrapping ErrUnsafeEnv that says to set it inside the command", e, err)
			}
			if err := CheckEnv([]string{"OK=1", e}); !errors.Is(err, ErrUnsafeEnv) {
				t.Errorf("CheckEnv(%q) = %v, want ErrUnsafeEnv", e, err)
			}
		}
	}
	for n := range host {
		if _, err := buildEnv([]string{n}, lookup); !errors.Is(err, ErrUnsafeEnv) {
			t.Errorf("buildEnv(%q) copied from here = %v, want ErrUnsafeEnv", n, err)
		}
	}
	// Forms that are no variable name at all stay refused as such.
	for _, e := range []string{"=x", "LD_PRELOAD\x00=x", "LD_PRELOAD =x", " PATH=x", "BASH_FUNC_f%%=() { :; }", "PATH\n=x"} {
		if _, err := buildEnv([]string{e}, lookup); !errors.Is(err, ErrBadEnv) && !errors.Is(err, ErrUnsafeEnv) {
			t.Errorf("buildEnv(%q) = %v, want a refusal", e, err)
		}
	}
	// Lookalikes that change nothing at startup pass.
	if _, err := buildEnv([]string{"MYPATH=x", "XLD_PRELOAD=x", "ENVIRONMENT=prod", "GOPATH=/go", "LDFLAGS=-s"}, lookup); err != nil {
		t.Errorf("harmless names refused: %v", err)
	}
	// Open refuses before it touches the backend (nil here) or the disk.
	ws := t.TempDir()
	if _, err := Open(context.Background(), nil, Config{Workspace: ws, Env: []string{"LD_PRELOAD=/tmp/evil.so"}}); !errors.Is(err, ErrUnsafeEnv) {
		t.Errorf("Open with LD_PRELOAD: %v, want ErrUnsafeEnv", err)
	}
}

func TestCheckRequest(t *testing.T) {
	ok := []Request{{Command: "x"}, {Command: "x", Timeout: time.Second}, {Command: "x", Timeout: 600 * time.Second}}
	for _, r := range ok {
		if err := CheckRequest(r, 10); err != nil {
			t.Errorf("CheckRequest(%+v) = %v", r, err)
		}
	}
	if err := CheckRequest(Request{Command: "12345678901"}, 10); !errors.Is(err, ErrCommandTooLarge) {
		t.Errorf("too large: %v", err)
	}
}

func TestObservation(t *testing.T) {
	r := &Result{Command: "make\r", ExitCode: 2, Output: "boom"}
	if got, want := r.Observation(), "$ make\\r\nboom\nexit status: 2\n"; got != want {
		t.Errorf("Observation = %q, want %q", got, want)
	}
	r = &Result{Command: "sleep 9", TimedOut: true, Killed: true, Timeout: time.Second, KillGrace: 5 * time.Second, ExitCode: 137}
	obs := r.Observation()
	if !strings.Contains(obs, "(no output)") || !strings.Contains(obs, "SIGTERM") || !strings.Contains(obs, "SIGKILL 5s later") {
		t.Errorf("timeout observation: %q", obs)
	}
	r = &Result{Command: "sleep 9", Killed: true, ExitCode: 137}
	if obs := r.Observation(); !strings.Contains(obs, "session closed") {
		t.Errorf("observation of a call the session's close killed: %q", obs)
	}
	r = &Result{Command: "x", OOMKilled: true, ExitCode: 137, Output: "a\n", SpillPath: "/o/call-0001.out", OutputBytes: 99}
	if obs := r.Observation(); !strings.Contains(obs, "out of memory") || !strings.Contains(obs, "/o/call-0001.out") {
		t.Errorf("oom observation: %q", obs)
	}
}

// TestRemoveAllAsRootChmodsNothing: as root, removing a session directory
// never changes modes. The fallback that makes directories writable walks
// by path and chmod follows symlinks: the workspace owner, who can write
// in the session's /tmp and HOME, could swap a directory for a symlink
// between the walk and the chmod and have root chmod any path. Root needs
// no write permission to remove, so it must not take that path at all.
func TestRemoveAllAsRootChmodsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "session")
	mnt := filepath.Join(dir, "tmp", "busy")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// A mount point makes the removal fail (EBUSY), as a racing writer
	// can (ENOTEMPTY).
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	if err := removeAll(dir); err == nil {
		t.Fatal("removeAll removed a directory holding a mount point")
	}
	if fi, err := os.Stat(mnt); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("after removeAll as root, %s: %v, %v; want its mode left 0755", mnt, fi.Mode(), err)
	}
}

func TestSessionIDValidated(t *testing.T) {
	for _, id := range []string{"..", "../x", "a/b", ".hidden", "x y", strings.Repeat("a", 65), "-x"} {
		if validID(id) {
			t.Errorf("validID(%q) = true", id)
		}
	}
	for _, id := range []string{"a", "0f3a9c", "ci-run_1.2", strings.Repeat("a", 64)} {
		if !validID(id) {
			t.Errorf("validID(%q) = false", id)
		}
	}
}
