// Command sandbash runs AI agents' shell commands in throw-away sandboxes.
//
// Run `sandbash help` for the commands, `sandbash run --help` for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandbash/sandbash/internal/termsafe"
)

// Exit codes of sandbash itself (the command's own code passes through).
const (
	exitTimedOut = 124 // the call timed out
	exitFailed   = 125 // sandbash failed or refused; nothing ran, or it could not finish
)

const usage = `sandbash runs shell commands in a throw-away sandbox that sees the project
workspace and little else: for AI coding agents that must not be handed the host.

Usage:
  sandbash run [flags] -- COMMAND     run one command in a fresh sandbox
  sandbash session open|list|close    keep a sandbox's /tmp, HOME and caches
                                      between runs (run --session ID)
  sandbash session diff|apply|reset|checkpoint|restore ID
                                      review what a session opened with
                                      --workspace-mode overlay changed, and
                                      apply it to the workspace
  sandbash mcp [flags]                serve a "bash" tool to an AI agent over MCP
  sandbash trust [--revoke]           approve the image the workspace's
                                      devcontainer.json names, as it is now
  sandbash doctor                     say which backends work here, and why not
  sandbash gc                         remove containers and volumes that sandbash
                                      processes which have died left behind
  sandbash help [COMMAND]             this text, or a command's flags

Every call runs 'bash -c COMMAND' in a new sandbox at the workspace root, with
stdin closed and nothing kept from earlier calls. Background processes end
with the call. The network is off unless you pass --network on.

Examples:
  sandbash run -- make test
  sandbash run --workspace ~/src/app --readable ~/src/lib -- 'go build ./... && ./app --version'
  sandbash run --json --timeout 30 -- 'npm test'

Exit status: the command's own; 124 if it timed out; 125 if sandbash failed or
refused to run it; 130 if you interrupted it.
`

// handOffEnv marks a process sandbash handed a command to (see
// kubernetes_off.go): a binary handed one that cannot run it refuses
// rather than hand it on again.
const handOffEnv = "SANDBASH_HANDED_OFF"

func main() {
	// Messages on a terminal can quote the command, its output or what an
	// engine said: they go through the same filter as the output.
	stderr, flush := termsafe.ForTerminal(os.Stderr, termsafe.Options{})
	if why := inPodmanUserns(); why != "" {
		fmt.Fprintln(stderr, "sandbash: "+why)
		flush()
		os.Exit(125)
	}
	prepareAhead(os.Args[1:])
	code := mainArgs(os.Args[1:], os.Stdout, stderr)
	flush()
	os.Exit(code)
}

func mainArgs(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "doctor":
		return doctorCmd(ctx, args[1:], stdout, stderr)
	case "gc":
		return gcCmd(ctx, args[1:], stdout, stderr)
	case "session":
		return sessionCmd(ctx, args[1:], stdout, stderr)
	case "mcp":
		return mcpCmd(ctx, args[1:], stdout, stderr)
	case "trust":
		return trustCmd(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return mainArgs([]string{args[1], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "sandbash: unknown command %q; run 'sandbash help' for the list\n", args[0])
		return 2
	}
}

// inPodmanUserns says why sandbash will not run when it finds itself in a
// rootless Podman user namespace, as its fake root: anything started under
// "podman unshare" runs there. There sandbash would take itself for root
// and the user's files for root's. "" when it is not there. Without the
// variable, fakeRoot still finds such a place. (Podman's own library,
// which sandbash no longer links, also moved a program whose name contains
// "podman" there before main: TestLinksNoPodmanLibrary.)
func inPodmanUserns() string {
	if os.Getenv("_CONTAINERS_USERNS_CONFIGURED") == "" {
		return fakeRoot()
	}
	return "this process runs in a rootless Podman user namespace (_CONTAINERS_USERNS_CONFIGURED is set: under `podman unshare`, say), where it would be a fake root; run sandbash outside it"
}

// fakeRoot says why sandbash will not run as root in a user namespace
// that leaves the host's root unmapped, whatever the environment says
// (`podman unshare` with the variable above removed or a clean
// environment, `unshare -r`, `buildah unshare`): there / shows as the
// overflow uid, not root's. In a container, rootless or not, / is the
// container's own and belongs to its root. "" when it is not so.
func fakeRoot() string {
	var st syscall.Stat_t
	if os.Geteuid() != 0 || syscall.Stat("/", &st) != nil || st.Uid == 0 {
		return ""
	}
	return fmt.Sprintf("this process is root only inside a user namespace that does not map the host's root (/ belongs to uid %d here): `podman unshare`, `unshare -r` or the like, where it would be a fake root and could keep none of root's promises (staged mounts, network namespaces); run sandbash outside it, as your own user", st.Uid)
}
