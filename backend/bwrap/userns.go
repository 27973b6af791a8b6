package bwrap

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A sandbox needs new user, mount, PID, IPC, UTS and network namespaces
// and a fresh /proc. What can refuse them is read from the host's settings
// below; root is "/" but in tests, which fake it.

// sysctl returns the value of /proc/sys/name under root, "" if unreadable.
func sysctl(root, name string) string {
	return readString(filepath.Join(root, "proc/sys", name))
}

// mayBeRestricted says, from settings alone (a few small reads, no
// process), whether something here may keep bubblewrap from creating a
// sandbox as uid: a kernel switch, a seccomp filter or an AppArmor profile
// on sandbash, a masked /proc (what container runtimes do). One-shot
// sessions run the no-op sandbox only then (see Backend.check); elsewhere
// bubblewrap works but for what no setting tells.
func mayBeRestricted(root string, uid int) bool {
	return confined(root) || len(kernelRestrictions(root, uid)) > 0
}

// confined is the part of mayBeRestricted that holds for every uid: a
// seccomp filter or an AppArmor profile on sandbash, a masked /proc.
func confined(root string) bool {
	return seccompFiltered(root) || appArmorProfile(root) != "" || len(maskedProc(root)) > 0
}

// kernelRestrictions are the kernel switches that forbid uid user
// namespaces, each with its fix.
func kernelRestrictions(root string, uid int) []string {
	var r []string
	if sysctl(root, "user/max_user_namespaces") == "0" {
		r = append(r, "user.max_user_namespaces is 0, which forbids user namespaces to everyone; fix: `sudo sysctl -w user.max_user_namespaces=15000` (and set it in /etc/sysctl.d to keep it)")
	}
	if uid == 0 {
		// The other two spare root (CAP_SYS_ADMIN).
		return r
	}
	if sysctl(root, "kernel/unprivileged_userns_clone") == "0" {
		r = append(r, "kernel.unprivileged_userns_clone is 0 (a Debian/Ubuntu kernel switch), which keeps user namespaces from users other than root; fix: `sudo sysctl -w kernel.unprivileged_userns_clone=1` (and set it in /etc/sysctl.d to keep it)")
	}
	if sysctl(root, "kernel/apparmor_restrict_unprivileged_userns") == "1" {
		r = append(r, "Ubuntu's AppArmor restriction is on (kernel.apparmor_restrict_unprivileged_userns=1): only programs with an AppArmor profile that allows userns may create user namespaces; fix: give bwrap a profile (/etc/apparmor.d/bwrap: `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }`, then `sudo apparmor_parser -r /etc/apparmor.d/bwrap`), or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`")
	}
	return r
}

// containerEngine names the container engine this process runs under
// ("Docker", "Podman", or what /proc/1/environ's container= says), "" on a
// host.
func containerEngine(root string) string {
	if _, err := os.Stat(filepath.Join(root, ".dockerenv")); err == nil {
		return "Docker"
	}
	if _, err := os.Stat(filepath.Join(root, "run/.containerenv")); err == nil {
		return "Podman"
	}
	b, _ := os.ReadFile(filepath.Join(root, "proc/1/environ"))
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("container=")); ok && len(v) > 0 {
			return string(v)
		}
	}
	return ""
}

// procStatus returns the field name of /proc/self/status under root, "" if
// there is none.
func procStatus(root, name string) string {
	for _, l := range strings.Split(readString(filepath.Join(root, "proc/self/status")), "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// seccompFiltered reports whether a seccomp filter is on this process.
func seccompFiltered(root string) bool { return procStatus(root, "Seccomp") == "2" }

// sandbashRoot reports whether this process runs as root (effective uid
// 0).
func sandbashRoot(root string) bool {
	f := strings.Fields(procStatus(root, "Uid"))
	return len(f) > 1 && f[1] == "0"
}

// sysAdmin reports whether this process holds CAP_SYS_ADMIN.
func sysAdmin(root string) bool {
	caps, err := strconv.ParseUint(procStatus(root, "CapEff"), 16, 64)
	return err == nil && caps&(1<<21) != 0
}

// maskedProc lists what is mounted over parts of /proc (a container
// runtime's masked paths): the kernel refuses a fresh /proc to a user
// namespace while anything hides part of the one it has. binfmt_misc,
// which hosts mount on /proc/sys/fs/binfmt_misc, hides nothing: the kernel
// lets it be (its directory is always empty).
func maskedProc(root string) []string {
	var m []string
	for _, line := range strings.Split(readString(filepath.Join(root, "proc/self/mountinfo")), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], "/proc/") && f[4] != "/proc/sys/fs/binfmt_misc" {
			m = append(m, f[4])
		}
	}
	return m
}

// appArmorProfile is the AppArmor profile confining this process, "" if
// none (or no AppArmor).
func appArmorProfile(root string) string {
	for _, p := range []string{"proc/self/attr/apparmor/current", "proc/self/attr/current"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		// "NAME (enforce)"; "unconfined", a profile in complain mode,
		// or another LSM's label (SELinux's user:role:type) refuse nothing.
		if s := strings.TrimSpace(strings.TrimRight(string(b), "\x00")); strings.HasSuffix(s, " (enforce)") {
			return s
		}
		return ""
	}
	return ""
}

// usernsRestriction names what in force here keeps bubblewrap from
// creating a sandbox as uid, and the fix for each; "" when it finds
// nothing. userns is what creating a user namespace as sandbash gave
// (cloneUserns), which tells a seccomp filter that refuses them from one
// that does not.
func usernsRestriction(root string, uid int, userns error) string {
	r := kernelRestrictions(root, uid)
	var what, flags []string
	engine := containerEngine(root)
	switch {
	case userns != nil && seccompFiltered(root):
		what = append(what, fmt.Sprintf("a seccomp filter refuses to create user namespaces (%v)", userns))
		flags = append(flags, "--security-opt seccomp=unconfined")
	case userns != nil && len(r) == 0:
		what = append(what, fmt.Sprintf("creating a user namespace fails (%v)", userns))
	case engine != "" && seccompFiltered(root):
		// Podman's default filter allows user namespaces but refuses
		// sethostname without CAP_SYS_ADMIN; Docker's refuses pivot_root
		// even with it.
		what = append(what, "a seccomp filter is in force, which may refuse what bwrap does in a sandbox (Podman's refuses it sethostname, Docker's pivot_root)")
		flags = append(flags, "--security-opt seccomp=unconfined")
	}
	if m := maskedProc(root); len(m) > 0 {
		if len(m) > 3 {
			m = append(m[:3:3], fmt.Sprintf("%d more", len(m)-3))
		}
		what = append(what, "parts of /proc are masked (mounts over "+strings.Join(m, ", ")+"), so the kernel refuses a sandbox its own /proc")
		flags = append(flags, map[bool]string{true: "--security-opt unmask=ALL", false: "--security-opt systempaths=unconfined"}[engine == "Podman"])
	}
	if p := appArmorProfile(root); p != "" {
		what = append(what, "AppArmor confines it (profile "+p+")")
		flags = append(flags, "--security-opt apparmor=unconfined")
	}
	const engines = "use --backend docker or podman with an image (--image, SANDBASH_IMAGE or devcontainer.json)"
	switch {
	case engine != "":
		if len(what) == 0 {
			what = append(what, "its runtime may forbid namespaces or a fresh /proc")
		}
		start := "--privileged"
		if len(flags) > 0 {
			start = "`" + strings.Join(flags, " ") + "`, or with --privileged"
			if sandbashRoot(root) && !sysAdmin(root) {
				// sandbash as root stages every mount (open_tree).
				start = "`" + strings.Join(flags, " ") + " --cap-add SYS_ADMIN` (SYS_ADMIN because sandbash as root stages the session's mounts; run it as another user to leave that out), or with --privileged"
			}
		}
		in := "a " + engine + " container"
		if engine != "Docker" && engine != "Podman" {
			in = "a container (" + engine + ")"
		}
		r = append(r, fmt.Sprintf("sandbash runs inside %s, where %s; fix: %s through the host's engine (mount its socket into this container), or start this container with %s",
			in, strings.Join(what, ", and "), engines, start))
	case len(what) > 0:
		r = append(r, fmt.Sprintf("sandbash runs confined: %s; fix: run it outside that confinement (a systemd unit's RestrictNamespaces= or SystemCallFilter=, flatpak, another sandbox), or %s",
			strings.Join(what, ", and "), engines))
	}
	return strings.Join(r, "; also ")
}

// cloneUserns creates a user namespace as sandbash would for bwrap, in a
// child that exits at once: it clones the child into a new user
// namespace, where executing a program that does not exist fails. It
// returns nil if the namespace was made, else why not.
func cloneUserns() error {
	pid, err := syscall.ForkExec("/nonexistent/sandbash-userns-probe", nil, &syscall.ProcAttr{
		Env: helperEnv,
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER},
	})
	switch {
	case errors.Is(err, syscall.ENOENT): // ForkExec reaped the child
		return nil
	case err == nil:
		_, _ = syscall.Wait4(pid, nil, 0, nil)
		return errors.New("creating a user namespace: the probe's missing program ran")
	}
	return fmt.Errorf("creating a user namespace: %w", err)
}
