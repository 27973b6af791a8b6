package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/backend/bwrap"
)

const doctorUsage = `Usage: sandbash doctor

Checks every backend on this host and says, for each, whether it can run
sandboxes and why not. Exits 0 when at least one backend works.
`

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if ok, code := noArgs(args, doctorUsage, stdout, stderr); !ok {
		return code
	}
	working := 0
	if b, err := bwrap.New(); err != nil {
		fmt.Fprintf(stdout, "bwrap:  unavailable: %v\n", err)
	} else {
		working++
		info := b.Info()
		overlay := "no native overlay flags (bubblewrap 0.9.0 added --overlay)"
		if info.NativeOverlay {
			overlay = "native --overlay flags"
		}
		fmt.Fprintf(stdout, "bwrap:  available: bubblewrap %s at %s; user namespaces usable; %s; caches: %s\n", info.Version, info.Path, overlay, info.CacheMethod)
		fmt.Fprintf(stdout, "        seccomp: %s; %s\n", info.Seccomp, info.Keyring)
		fmt.Fprintf(stdout, "        limits: %s\n", info.Limits.Summary)
	}
	for _, c := range containerBackends {
		ok, line := c.doctor(ctx)
		state := "unavailable"
		if ok {
			state = "available"
			working++
		}
		fmt.Fprintf(stdout, "%-7s %s: %s\n", c.name+":", state, line)
	}
	fmt.Fprintf(stdout, "uids:   %s\n", identityLine(os.Geteuid()))
	if working == 0 {
		fmt.Fprintln(stderr, "sandbash: no backend works on this host; install bubblewrap (sudo apt-get install bubblewrap), or Docker or Podman")
		return 1
	}
	return 0
}

// identityLine says who calls run as, which never is host root.
func identityLine(euid int) string {
	if euid == 0 {
		return fmt.Sprintf("calls run as the workspace owner; a root-owned workspace's calls run as uid %d:%d, seeing it through idmapped mounts (files they create belong to root; no call holds host uid 0); every mount is staged in /run/sandbash, nosuid, nodev", backend.SandboxUID, backend.SandboxGID)
	}
	return fmt.Sprintf("calls run as you (uid %d) on bwrap and as the workspace owner on container engines; a root-owned workspace is refused on container engines (only a root sandbash can map it)", euid)
}
