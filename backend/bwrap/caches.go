package bwrap

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/sysbin"
	"github.com/sandbash/sandbash/overlay"
)

// Caches are mounted once per session, in a mount namespace of its own that
// a holder process keeps alive; every call's bwrap enters it (nsenter) and
// binds the merged directories. That gives each session's upper layer
// exactly one live mount however calls overlap (per-call overlays, bwrap
// 0.9's --overlay included, would mount it once per call), works with every
// bubblewrap, and leaves nothing mounted on the host: when the holder dies,
// with the session or with sandbash, its namespace and mounts go with it.
type holder struct {
	cmd     *exec.Cmd
	nsenter string
	userns  bool // sandbash is not root: the namespace has its own user namespace
}

// startHolder mounts spec's overlays in a new mount namespace.
func startHolder(spec *backend.SessionSpec) (*holder, error) {
	unshare, err := sysbin.Find("unshare")
	if err != nil {
		return nil, fmt.Errorf("bwrap: caches need unshare and nsenter (util-linux): %v: %w", err, backend.ErrUnavailable)
	}
	nsenter, err := sysbin.Find("nsenter")
	if err != nil {
		return nil, fmt.Errorf("bwrap: caches need unshare and nsenter (util-linux): %v: %w", err, backend.ErrUnavailable)
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, o := range spec.Overlays {
		fmt.Fprintf(&script, "mount -t overlay overlay -o %s %s\n", shellQuote(overlay.Options(o)), shellQuote(overlay.Merged(o)))
	}
	script.WriteString("echo ready\nexec sleep infinity\n")
	h := &holder{nsenter: nsenter, userns: os.Geteuid() != 0}
	args := []string{"--mount", "--propagation", "private"}
	if h.userns {
		// Unprivileged overlay mounts need a user namespace (Linux 5.11+).
		args = append([]string{"--user", "--map-root-user"}, args...)
	}
	h.cmd = exec.Command(unshare, append(args, "--", "sh", "-c", script.String())...)
	h.cmd.Dir = "/"
	h.cmd.Env = helperEnv
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr bytes.Buffer
	h.cmd.Stderr = &stderr
	out, err := h.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bwrap: starting the cache namespace: %w", err)
	}
	ready := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		ready <- line == "ready\n"
	}()
	ok := false
	select {
	case ok = <-ready:
	case <-time.After(30 * time.Second):
	}
	if !ok {
		h.stop()
		msg := strings.TrimSpace(stderr.String())
		if h.userns {
			msg += " (without root, overlay mounts need Linux 5.11 or later with unprivileged user namespaces)"
		}
		return nil, fmt.Errorf("bwrap: mounting the session's caches failed: %s: %w", msg, backend.ErrSetup)
	}
	return h, nil
}

// command returns the program and arguments that run bwrap inside the
// holder's namespace, as uid:gid.
func (h *holder) command(bwrapPath string, uid, gid int) (string, []string) {
	pid := strconv.Itoa(h.cmd.Process.Pid)
	args := []string{"--mount=/proc/" + pid + "/ns/mnt"}
	if h.userns {
		args = []string{"--user=/proc/" + pid + "/ns/user", "--mount=/proc/" + pid + "/ns/mnt", "--preserve-credentials"}
	} else if uid != 0 || gid != 0 {
		args = append(args, "--setuid", strconv.Itoa(uid), "--setgid", strconv.Itoa(gid))
	}
	return h.nsenter, append(args, "--", bwrapPath)
}

// stop ends the holder; its namespace and mounts go with it. Wait
// reports the kill, which is what was meant.
func (h *holder) stop() {
	if h.cmd.Process != nil {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
