package sandbash

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Result describes one finished call.
type Result struct {
	// Backend is the backend's name.
	Backend string
	// Command is the command as given (raw; see EscapeCommand to show it).
	Command string
	// ExitCode is bash's exit status; 128+N when killed by signal N.
	ExitCode int
	// TimedOut: the timeout expired and the call was sent SIGTERM.
	TimedOut bool
	// Killed: sandbash sent the call SIGKILL: it outlived the grace period
	// after SIGTERM, the caller's context was cancelled, or the session
	// closed while it ran.
	Killed bool
	// OOMKilled: the sandbox's memory limit killed the call.
	OOMKilled bool
	// Canceled: the caller's context ended the call.
	Canceled bool
	// Timeout and KillGrace are the limits the call ran under.
	Timeout, KillGrace time.Duration
	// Duration is the wall time of the call.
	Duration time.Duration
	// Output is the rendered combined output: all of it, or head, marker and
	// tail when Truncated. Always valid UTF-8.
	Output string
	// OutputBytes is the exact size of the output stream.
	OutputBytes int64
	// Truncated: Output leaves out the middle of the stream.
	Truncated bool
	// SpillPath is the file holding the full stream when it was truncated.
	SpillPath string
	// EgressDenied lists the destinations ("host:port") the session's
	// egress rules kept the call from reaching, in the order first tried.
	EgressDenied []string
	// EgressDeniedOmitted counts the denials EgressDenied leaves out
	// because it was full (see egress.MaxDenied).
	EgressDeniedOmitted int
	// Failure, when sandbash could not see the call to its end (the engine
	// stopped or lost it, the output stream broke), says what happened;
	// Run then also returns it as an error. ExitCode is then only what
	// the sandbox last reported.
	Failure string
}

// Observation renders the result as an agent should see it: the escaped
// command, the output (with its truncation marker), and how the call ended.
func (r *Result) Observation() string {
	var b strings.Builder
	b.WriteString("$ " + EscapeCommand(r.Command) + "\n")
	switch {
	case r.Output == "":
		b.WriteString("(no output)\n")
	default:
		b.WriteString(r.Output)
		if !strings.HasSuffix(r.Output, "\n") {
			b.WriteString("\n")
		}
	}
	b.WriteString(r.Status() + "\n")
	if len(r.EgressDenied) > 0 {
		fmt.Fprintf(&b, "egress denied (no rule of the session allows it; ask the user to allow what the task needs): %s%s\n", strings.Join(r.EgressDenied, ", "), r.deniedOmitted())
	}
	if r.SpillPath != "" {
		fmt.Fprintf(&b, "full output (%d bytes) saved to %s\n", r.OutputBytes, r.SpillPath)
	}
	return b.String()
}

// deniedOmitted says how many denials EgressDenied leaves out, if any.
func (r *Result) deniedOmitted() string {
	if r.EgressDeniedOmitted == 0 {
		return ""
	}
	return fmt.Sprintf("; and %d more denials not listed (the egress log, if kept, has every one)", r.EgressDeniedOmitted)
}

// Status says in one line how the call ended.
func (r *Result) Status() string {
	switch {
	case r.Failure != "":
		return fmt.Sprintf("sandbash could not see the call to its end: %s", r.Failure)
	case r.TimedOut && r.Killed:
		return fmt.Sprintf("timed out after %v: sent SIGTERM to every process of the call, then SIGKILL %v later; the output above is what it printed until then (exit status: %d)", r.Timeout, r.KillGrace, r.ExitCode)
	case r.TimedOut:
		return fmt.Sprintf("timed out after %v: sent SIGTERM to every process of the call, which ended before SIGKILL was due %v later (exit status: %d)", r.Timeout, r.KillGrace, r.ExitCode)
	case r.OOMKilled:
		return fmt.Sprintf("killed for running out of memory: the sandbox's memory limit was reached (exit status: %d)", r.ExitCode)
	case r.Canceled:
		return fmt.Sprintf("cancelled: the call was killed before it finished (exit status: %d)", r.ExitCode)
	case r.Killed:
		return fmt.Sprintf("killed: the session closed while the call ran (exit status: %d)", r.ExitCode)
	}
	return fmt.Sprintf("exit status: %d", r.ExitCode)
}

// EscapeCommand makes a command safe to show on a terminal or to a person
// approving it: control bytes (carriage return, escape sequences, ...),
// invisible and bidirectional-override characters and invalid UTF-8 are
// written as Go-style escapes, so nothing in the text can hide what runs.
// Newlines and tabs are kept. What runs is always the raw command.
func EscapeCommand(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case hidden(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// hidden reports runes that change or hide how text displays: C1 controls,
// bidirectional overrides and isolates, zero-width characters.
func hidden(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f,
		r >= 0x200b && r <= 0x200f,
		r >= 0x202a && r <= 0x202e,
		r >= 0x2060 && r <= 0x2069,
		r == 0x061c, r == 0xfeff:
		return true
	}
	return false
}
