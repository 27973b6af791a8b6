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

func main() {
	// Messages on a terminal can quote the command, its output or what an
	// engine said: they go through the same filter as the output.
	stderr, flush := termsafe.ForTerminal(os.Stderr, termsafe.Options{})
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
