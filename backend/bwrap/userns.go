package bwrap

import (
	"os"
	"path/filepath"
	"strings"
)

// usernsRestriction names what keeps unprivileged user namespaces from
// this host, and the fix, as far as the kernel's settings tell; "" when
// none of them is in force. procSys is /proc/sys (a parameter for tests).
func usernsRestriction(procSys string) string {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(procSys, name))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	switch {
	case read("user/max_user_namespaces") == "0":
		return "user.max_user_namespaces is 0, which forbids user namespaces to everyone; fix: `sudo sysctl -w user.max_user_namespaces=15000` (and set it in /etc/sysctl.d to keep it)"
	case read("kernel/unprivileged_userns_clone") == "0":
		return "kernel.unprivileged_userns_clone is 0 (a Debian/Ubuntu kernel switch), which keeps user namespaces from users other than root; fix: `sudo sysctl -w kernel.unprivileged_userns_clone=1` (and set it in /etc/sysctl.d to keep it), or run sandbash as root"
	case read("kernel/apparmor_restrict_unprivileged_userns") == "1":
		return "Ubuntu's AppArmor restriction is on (kernel.apparmor_restrict_unprivileged_userns=1): only programs with an AppArmor profile that allows userns may create user namespaces; fix: give bwrap a profile (/etc/apparmor.d/bwrap: `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }`, then `sudo apparmor_parser -r /etc/apparmor.d/bwrap`), or `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
	}
	if inContainer() {
		return "sandbash runs inside a container whose runtime forbids creating user namespaces (Docker's and Podman's default seccomp profile and dropped capabilities do); fix: use the Docker or Podman backend through the host's engine, or start this container with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (or a seccomp profile that allows unshare and clone with CLONE_NEWUSER)"
	}
	return ""
}

// inContainer reports whether this process runs in a Docker, Podman or
// other OCI container.
func inContainer() bool {
	for _, p := range []string{"/.dockerenv", "/run/.containerenv"} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	b, _ := os.ReadFile("/proc/1/environ")
	return strings.Contains(string(b), "container=")
}
