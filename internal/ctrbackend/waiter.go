// Package ctrbackend holds what the container backends (docker, podman)
// share: the one session and call lifecycle ([Backend], over an [Engine]
// that each backend implements), the in-container supervisor that runs
// one call, the trailer it reports completion with, the warm single-use
// pool, the options, labels and limits.
//
// # One container, one call
//
// A container is created and started ahead of time with a small bash
// supervisor, the waiter, as its PID 1: no engine init (docker-init,
// catatonit), which would run as the call's user, dumpable, so that a
// command could take it over through /proc/1/mem and keep the container
// alive after its call. The waiter is non-dumpable (see below), so it
// cannot be taken over; it sets every signal but SIGTERM and SIGCHLD
// ignored, and as the PID namespace's init it gets neither SIGKILL nor
// SIGSTOP from inside the container; it reaps the container's orphans as
// bash reaps any child. The waiter blocks reading
// its stdin. A call writes a fresh random
// nonce, the command and the call's environment to that stdin (see
// [Handover]); the waiter runs `bash -c <command>` with exactly that
// environment, with stdout and stderr merged into the container's stdout
// (and with the highest OOM score, so that when the memory limit is hit the
// kernel kills the command, not the supervisor), waits for it, kills every
// other process left in the container, and writes a trailer
// `\x1e<nonce> <exit status> <oom kills> <why>\n` to the same stdout. Reading that
// trailer is how sandbash learns, in-band and in a few milliseconds, that
// the call is over, without waiting for the container to exit. The
// container is then removed; a one-shot session leaves that to the engine
// (Spec.AutoRemove), and the container ends when the waiter, its PID 1,
// exits once its stdin is closed.
//
// # The environment
//
// The container's own environment, which the supervisor starts with, is
// fixed: [SupervisorEnv] (PATH), with everything the image's ENV sets
// removed (the backends ask the engine to), plus what the engine adds by
// itself (HOSTNAME, HOME). The supervisor runs in bash's privileged mode
// (-p): it reads no BASH_ENV or ENV file and imports no functions,
// SHELLOPTS, BASHOPTS, CDPATH or GLOBIGNORE, even if an engine passed them.
// So nothing a call can write (a file the image's BASH_ENV names in /tmp,
// say) runs in a later call's supervisor. The call's environment travels
// with the command; the supervisor clears every exported variable in the
// command's process and exports exactly the call's, so neither the image's
// ENV nor the engine's additions reach the command.
//
// # Why the command cannot forge the trailer
//
// The command would need the nonce. It is never in an argument, an
// environment variable or a file: it goes over the waiter's stdin, which the
// command does not inherit. The waiter runs from an execute-only copy of
// bash, so the kernel marks it non-dumpable: a process of the same uid can
// neither open /proc/<waiter>/fd, /environ or /mem nor ptrace it. A command
// that kills the waiter ends its own call without any exit status, which is
// reported as such.
//
// # Why the command cannot blind the supervisor
//
// The waiter, PID 1, keeps every clock itself and forks nothing once the
// command runs (so a command that fills the container's pids limit does
// not stop it). It learns of events from one pipe, which only its own
// helpers hold open for writing: a relay that turns each heartbeat on the
// container's stdin into a line and writes "lost" at its end, and the
// command's parent, which writes "done <status>" when the command ends.
// Both are forked from the waiter without an exec, so they are
// non-dumpable too: the command, which holds no end of the pipe, can
// neither open one through /proc nor trace them. It can stop or kill them
// (they are its uid): a stopped relay brings no heartbeat, and the waiter
// ends the call as lost (the deadline too is its own clock); a helper
// gone before its last line (the waiter looks after every line or
// timeout: kill -0, and /proc/<pid>/stat for a zombie), or the pipe's
// end, makes the waiter end the call as unwatched, the command's status
// lost with its parent. A command that stops only its parent withholds
// its own end: its call runs until its deadline or the heartbeat's end.
// A stop (SIGTERM to PID 1, the deadline, lost) sends SIGTERM
// to every process, and the waiter's own clock SIGKILLs them after the
// grace period, once any reason but SIGTERM came: the first reason is
// the one reported. The signals a command can send PID 1 are all ignored
// but SIGTERM, which the trailer reports as such (sandbash says the call
// may have sent it).
package ctrbackend

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// SupervisorDir is a per-container tmpfs (exec, owned by the sandbox user)
// that holds the waiter's execute-only copy of bash.
const SupervisorDir = "/run/sandbash"

// SupervisorPath is PATH in the container's own environment: where the
// supervisor finds bash, cp and chmod.
const SupervisorPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CallEnv is the environment of a call's command in a container: the
// session's, with PATH taken from the image's own environment when the
// image sets one (its tools are where its PATH says; a call cannot choose
// it), else the session's default.
func CallEnv(env, imageEnv []string) []string {
	path := ""
	for _, e := range imageEnv {
		if v, ok := strings.CutPrefix(e, "PATH="); ok && v != "" {
			path = v
		}
	}
	if path == "" {
		return env
	}
	out := make([]string, 0, len(env)+1)
	out = append(out, "PATH="+path)
	for _, e := range env {
		if !strings.HasPrefix(e, "PATH=") {
			out = append(out, e)
		}
	}
	return out
}

// SupervisorEnv is the container's own environment. Backends also remove
// every variable the image's ENV sets.
func SupervisorEnv() []string { return []string{"PATH=" + SupervisorPath} }

// boot copies bash to an execute-only file and re-executes the waiter from
// it, which makes the waiter non-dumpable. The waiter gets the path of bash,
// which runs the command.
const boot = `b=$(command -v bash)
w=` + SupervisorDir + `/waiter
if ! type compgen >/dev/null 2>&1; then
  echo "sandbash: the image's bash lacks compgen (programmable completion), which the call supervisor needs" >&2
  exit 96
fi
if ! cp "$b" "$w" || ! chmod 0111 "$w"; then
  echo "sandbash: the image needs cp and chmod to prepare the call supervisor" >&2
  exit 96
fi
exec "$w" -p -c "$1" sandbash "$b"`

// waiter runs one call; see the package comment. It opens the output
// channel read-write first, which never blocks, then write-only through
// /proc/self/fd, and drops the read-write descriptor: a plain write-only
// open of a FIFO blocks until a reader exists, so a sandbash killed before
// the supervisor got there left it blocked for good, deaf to the end of its
// stdin, and the warm container ran on (TestWarmContainerOfDeadSandbash).
// Holding no read end, a supervisor whose reader died gets an error
// writing the trailer (SIGPIPE, which PID 1 ignores) and ends at its
// stdin's end. In the command's subshell, the positional parameters carry
// bash's path, the command and the environment past the exports, which
// could otherwise overwrite the supervisor's variables.
//
// The waiter's loop reads the event pipe (see the package comment) with a
// timeout of 1 s, and checks its clocks after every line or timeout, from
// SECONDS: the deadline, the heartbeat's silence (longer than the
// handover's beat seconds is lost) and, after a stop, the SIGKILL time. A
// trapped SIGTERM does not interrupt that read; it is handled within the
// second. The parent's first line names it and the relay ("w <pid>
// <pid>"); the relay's death after its "lost" is no news. The command's
// subshell writes "c" once it set SIGTERM back to its default (the helpers
// ignore it, and a subshell inherits that): the waiter sends no SIGTERM
// before, which the command would otherwise ignore. Every signal but
// SIGTERM and SIGCHLD is set ignored, because
// bash's read catches HUP, INT, USR1, ALRM and more while it waits and
// exits on them, which would let a command end its PID 1 (and so its
// trailer); the command's subshell sets them back to their defaults before
// the exec. The helpers ignore SIGTERM, so that the waiter's kill -TERM -1
// leaves them to report. The pipe is read one line at a time by
// sb_next (see eventReader).
const waiter = `sb_why=-
sb_sig=
sb_kill=
sb_ready=
sb_termq=
sb_stop() {
  if [ "$1" != - ] && [ "$sb_why" = - ]; then
    sb_why=$1
    sb_termq=1
  fi
  if [ "$1" != - ] && [ "$1" != term ] && [ -z "$sb_kill" ]; then
    sb_kill=$((SECONDS + sb_grace + 1))
    sb_termq=1
  fi
  if [ -n "$sb_termq" ] && [ -n "$sb_ready" ]; then
    sb_termq=
    kill -TERM -1 2>/dev/null
  fi
}
sb_sigs=
for sb_s in $(compgen -A signal); do
  case $sb_s in SIGTERM|SIGCHLD|SIGKILL|SIGSTOP) ;; *) sb_sigs="$sb_sigs $sb_s" ;; esac
done
trap '' $sb_sigs
trap 'sb_sig=1' TERM
sb_bash=$1
sb_via=stdout
if [ -p ` + ChannelDir + `/out ] && exec {sb_rw}<>` + ChannelDir + `/out; then
  if exec {sb_out}>/proc/self/fd/$sb_rw; then sb_via=channel; fi
  exec {sb_rw}<&-
fi
[ "$sb_via" = channel ] || exec {sb_out}>&1
echo ` + ReadyLine + ` $sb_via >&2
IFS=' ' read -r sb_nonce sb_len sb_nenv sb_deadline sb_grace sb_beat || exit 0
[ -n "$sb_nonce" ] || exit 0
sb_cmd=
[ "$sb_len" -gt 0 ] && LC_ALL=C IFS= read -r -N "$sb_len" sb_cmd
sb_env=()
while [ "${#sb_env[@]}" -lt "$sb_nenv" ] && LC_ALL=C IFS= read -r -d '' sb_e; do sb_env+=("$sb_e"); done
if [ "${#sb_env[@]}" != "$sb_nenv" ]; then
  echo "sandbash: the call's environment did not arrive whole" >&2
  exit 97
fi
exec {sb_ev}< <(
  trap '' TERM
  (
    exec {sb_out}>&-
    while IFS= read -r _; do echo b; done
    echo lost
  ) <&0 2>/dev/null &
  echo "w $BASHPID $!"
  exec 0</dev/null
  (
    trap - TERM $sb_sigs
    echo c
    exec >&$sb_out 2>&1 {sb_out}>&-
    set -- "$sb_bash" "$sb_cmd" "${sb_env[@]}"
    unset -v $(compgen -e) || exit 97
    [ $# -le 2 ] || export -- "${@:3}" || exit 97
    exec "$1" -c '` + commandReader + `' "$1" 3< <(printf '%s\0' "$2")
  ) </dev/null &
  sb_pid=$!
  exec {sb_out}>&-
  wait "$sb_pid"
  echo "done $?"
)
sb_rc=137
sb_end=$((SECONDS + sb_deadline))
sb_last=$SECONDS
sb_w=
sb_d=
sb_tick=1
` + eventReader + `
while :; do
  sb_next
  sb_r=$?
  if [ "$sb_r" -eq 0 ]; then
    case $sb_l in
    b) sb_last=$SECONDS ;;
    c)
      sb_ready=1
      sb_stop - ;;
    lost)
      sb_d=
      sb_stop lost ;;
    "w "*)
      sb_l=${sb_l#w }
      sb_w=${sb_l% *}
      sb_d=${sb_l#* } ;;
    "done "*)
      sb_rc=${sb_l#done }
      case $sb_rc in ''|*[!0-9]*) sb_rc=137 ;; esac
      break ;;
    esac
  elif [ "$sb_r" -eq 2 ]; then
    [ "$sb_why" != - ] || sb_why=unwatched
    break
  fi
  sb_gone=
  for sb_p in $sb_w $sb_d; do
    if kill -0 "$sb_p" 2>/dev/null; then
      sb_st=
      { read -r sb_st < "/proc/$sb_p/stat"; } 2>/dev/null
      case ${sb_st##*) } in Z*|X*) sb_gone=1 ;; esac
    else
      sb_gone=1
    fi
  done
  if [ -n "$sb_gone" ] && ! read -r -t 0 -u "$sb_ev"; then
    [ "$sb_why" != - ] || sb_why=unwatched
    break
  fi
  if [ -n "$sb_sig" ]; then
    sb_sig=
    sb_stop term
  fi
  [ "$sb_deadline" -le 0 ] || [ "$SECONDS" -lt "$sb_end" ] || sb_stop deadline
  [ "$sb_beat" -le 0 ] || [ $((SECONDS - sb_last)) -le "$sb_beat" ] || sb_stop lost
  [ -z "$sb_kill" ] || [ "$SECONDS" -lt "$sb_kill" ] || kill -KILL -1 2>/dev/null
done
exec {sb_ev}<&-
sb_n=0
while kill -KILL -1 2>/dev/null && [ "$sb_n" -lt 100000 ]; do sb_n=$((sb_n+1)); done
sb_oom=0
for sb_f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
  [ -r "$sb_f" ] || continue
  while read -r sb_k sb_v; do [ "$sb_k" = oom_kill ] && sb_oom=$sb_v; done < "$sb_f"
  break
done
printf '\036%s %d %d %s\n' "$sb_nonce" "$sb_rc" "$sb_oom" "$sb_why" >&$sb_out
exec {sb_out}>&-
sb_end=$((SECONDS + 10))
while [ "$SECONDS" -lt "$sb_end" ] && IFS= read -r -t 3 _; do :; done`

// eventReader defines sb_next, which reads the next line of the event pipe
// (fd $sb_ev) into sb_l and returns 0; 1 when none ended within $sb_tick
// seconds; 2 at the pipe's end. It reads a byte at a time (-N 1), each
// with the timeout, and keeps a line begun across calls in sb_part: a
// byte read as the timeout strikes stays in its variable, and the line's
// newline is a byte like the others. One read of the whole line with the
// timeout lost lines: when the timeout struck as the read took the
// newline, bash returned the timeout with the newline consumed, and the
// line ran into the next (a "done" lost that way, the waiter ended a call
// that had ended by itself as unwatched: TestEventReaderKeepsLines). It
// costs about 0.1 ms per line more than a whole-line read. Bash before
// 5.2 times a read out with SIGALRM, which it catches meanwhile even
// where ignored: a command's kill -ALRM 1 then ends one read early, which
// is a timeout like any other (the clocks are checked, the line kept).
const eventReader = `sb_part=
sb_next() {
  sb_l=
  while :; do
    sb_c=
    IFS= read -r -N 1 -t "$sb_tick" -u "$sb_ev" sb_c
    sb_r=$?
    if [ -z "$sb_c" ]; then
      [ "$sb_r" -gt 128 ] && return 1
      return 2
    fi
    if [ "$sb_c" = $'\n' ]; then
      sb_l=$sb_part
      sb_part=
      return 0
    fi
    sb_part=$sb_part$sb_c
  done
}`

// commandReader is the script the command's bash runs (as its -c string,
// fixed text, so the command is in no process's argv, which the host's ps
// shows): it gives itself the highest OOM score (so that when the memory
// limit is hit the kernel kills the command, not the supervisor; the
// supervisor cannot set it, being non-dumpable, which makes its /proc
// files root's), reads the command from fd 3, closes it, and runs it as
// `bash -c` would (see backend/bwrap's readerScript for what eval keeps of
// -c: exit statuses, exit, exec, traps, $0, $$, $LINENO, and
// $BASH_EXECUTION_STRING, set here as -c sets it).
const commandReader = `{ echo 1000 >/proc/self/oom_score_adj; } 2>/dev/null; IFS= read -r -d "" BASH_EXECUTION_STRING <&3; exec 3<&-; : "$BASH"; eval "$BASH_EXECUTION_STRING"`

// ReadyLine is what the waiter writes to the container's stderr once it
// waits for its call, followed by how the call's output will go: " channel"
// (the FIFO sandbash offered at ChannelDir) or " stdout" (the container's
// stdout, the engine's attach stream). A container counts as warm only
// after it.
const ReadyLine = "sandbash-supervisor-ready"

// ChannelDir is where a container finds the output channel sandbash offers
// it, a FIFO named "out", when the engine runs on this host (see
// [Spec.ChannelDir]).
const ChannelDir = "/run/sandbash-out"

// WaitReady reads a container's stderr until the waiter's ready line, and
// reports whether the waiter writes the call's output to the channel. It
// returns what the container wrote instead, if it ended first.
func WaitReady(stderr io.Reader) (channel bool, err error) {
	var seen []byte
	buf := make([]byte, 512)
	for {
		n, err := stderr.Read(buf)
		seen = append(seen, buf[:n]...)
		if bytes.Contains(seen, []byte(ReadyLine+" channel\n")) {
			return true, nil
		}
		if bytes.Contains(seen, []byte(ReadyLine+" stdout\n")) {
			return false, nil
		}
		if err != nil {
			msg := strings.TrimSpace(string(seen))
			if msg == "" {
				msg = err.Error()
			}
			return false, fmt.Errorf("container: the call supervisor did not start: %s", msg)
		}
		if len(seen) > 4<<10 {
			seen = seen[len(seen)-1<<10:]
		}
	}
}

// Command is the container command that runs the waiter.
func Command() []string { return []string{"bash", "-p", "-c", boot, "sandbash", waiter} }

// Handover is what a call writes to the waiter's stdin: the nonce, the
// command's length in bytes, the number of environment entries, the
// deadline and the kill grace (whole seconds, rounded up; a deadline of 0
// is none) on one line, then the command, then each entry (NAME=VALUE)
// followed by a NUL byte. The lengths let the waiter start without waiting
// for end of input to cross the daemon. env must have passed [CheckEnv].
//
// After the trailer the waiter keeps reading its stdin until the writer
// closes it, 3 s pass with no line, or 10 s in all: an engine that relays
// stdin may end the whole stream when a write finds the container gone
// (Podman does), and a heartbeat racing the waiter's exit would then lose
// the trailer. The writer stops its heartbeat at the trailer and closes
// stdin when it removes the container, which may wait (see [Later]).
//
// The writer keeps the waiter's stdin open for as long as the call runs and
// writes a [Heartbeat] to it: its end or silence (sandbash gone or stopped,
// the engine's connection lost) makes the waiter end the call, as does the
// deadline passing; see [Trailer.Stop].
func Handover(nonce, command string, env []string, deadline, grace time.Duration) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %d %d %d %d\n%s", nonce, len(command), len(env), ceilSeconds(deadline), ceilSeconds(grace), ceilSeconds(HeartbeatTimeout), command)
	for _, e := range env {
		b.WriteString(e)
		b.WriteByte(0)
	}
	return b.Bytes()
}

// HeartbeatInterval is how often [Heartbeat] writes; a waiter that hears
// nothing for HeartbeatTimeout ends its call.
const (
	HeartbeatInterval = time.Second
	HeartbeatTimeout  = 6 * time.Second
)

// Heartbeat writes a newline to a waiter's stdin every HeartbeatInterval
// until stop is closed or a write fails.
func Heartbeat(w io.Writer, stop <-chan struct{}) {
	t := time.NewTicker(HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if _, err := w.Write([]byte{'\n'}); err != nil {
				return
			}
		}
	}
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// CheckEnv refuses a call environment the supervisor cannot pass on
// exactly: an entry that is not NAME=VALUE with a shell variable name, or
// that holds a NUL byte.
func CheckEnv(env []string) error {
	for _, e := range env {
		name, val, ok := strings.Cut(e, "=")
		if !ok || !shellName(name) || strings.IndexByte(val, 0) >= 0 {
			return fmt.Errorf("container: environment entry %q: give NAME=VALUE, NAME of letters, digits and _ (not starting with a digit), and no NUL byte", e)
		}
	}
	return nil
}

func shellName(s string) bool {
	for i, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// NewNonce returns a fresh unguessable nonce.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Trailer is what the waiter reports when a call ends.
type Trailer struct {
	ExitCode int
	OOMKills int
	// Stop is why the waiter ended the call itself, or "" when the
	// command ended on its own: StopTerm (the container's PID 1 got
	// SIGTERM, from sandbash's timeout, from the engine, or from a
	// process of the call), StopLost (its stdin ended or brought no
	// heartbeat: sandbash or the engine's connection went away, or the
	// call stopped or killed the waiter's heartbeat relay), StopDeadline
	// (the call's deadline passed while sandbash did not end it: the
	// waiter's own clock, which the call cannot move), StopUnwatched
	// (the call killed the waiter's helpers). When several happen, the
	// first is reported.
	Stop string
}

// Why a waiter ended a call (Trailer.Stop).
const (
	StopTerm      = "term"
	StopLost      = "lost"
	StopDeadline  = "deadline"
	StopUnwatched = "unwatched"
)

// Scanner passes a container's stdout through to Out, holding back and
// removing the waiter's trailer. It is an io.Writer fed with the stdout
// stream in order.
type Scanner struct {
	Out     io.Writer
	marker  []byte
	pending []byte
	trailer *Trailer
	err     error
}

// maxTrailer bounds the trailer's line after its marker: "<exit status>
// <oom kills> <why>" is far shorter.
const maxTrailer = 256

// NewScanner returns a Scanner looking for the trailer with nonce.
func NewScanner(out io.Writer, nonce string) *Scanner {
	if out == nil {
		out = io.Discard
	}
	return &Scanner{Out: out, marker: []byte("\x1e" + nonce + " ")}
}

// Write passes p on, except the trailer and anything that may be its start.
func (s *Scanner) Write(p []byte) (int, error) {
	if s.trailer != nil {
		return len(p), nil // nothing of the call runs after the trailer
	}
	s.pending = append(s.pending, p...)
	if i := bytes.Index(s.pending, s.marker); i >= 0 {
		s.emit(s.pending[:i])
		rest := s.pending[i+len(s.marker):]
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 && len(rest) > maxTrailer {
			// Not the supervisor's: its line is short. Whoever wrote it
			// knew the nonce; hold none of what follows.
			s.err = fmt.Errorf("container: malformed call trailer %q (longer than %d bytes)", rest[:32], maxTrailer)
			s.emit(s.pending[:i])
			s.pending = nil
			return len(p), nil
		}
		if nl < 0 {
			s.pending = append(s.pending[:0], s.pending[i:]...)
			return len(p), nil
		}
		s.trailer, s.err = parseTrailer(string(rest[:nl]))
		s.pending = nil
		return len(p), nil
	}
	// Hold back only a suffix that may be the trailer's beginning, so
	// ordinary output is never delayed. The marker holds \x1e only at its
	// start (the nonce is hex), so only the last \x1e can begin it, and
	// only within the last len(marker)-1 bytes (a whole marker was not
	// found).
	tail := max(0, len(s.pending)-len(s.marker)+1)
	j := bytes.LastIndexByte(s.pending[tail:], 0x1e)
	if j >= 0 {
		j += tail
	}
	if j < 0 || !bytes.HasPrefix(s.marker, s.pending[j:]) {
		j = len(s.pending)
	}
	s.emit(s.pending[:j])
	s.pending = append(s.pending[:0], s.pending[j:]...)
	return len(p), nil
}

func (s *Scanner) emit(b []byte) {
	if len(b) > 0 {
		_, _ = s.Out.Write(b)
	}
}

// Done returns the trailer once it was seen.
func (s *Scanner) Done() (*Trailer, error) { return s.trailer, s.err }

// Flush passes on what was held back, at the end of a stream that had no
// trailer.
func (s *Scanner) Flush() {
	if s.trailer == nil {
		s.emit(s.pending)
		s.pending = nil
	}
}

func parseTrailer(s string) (*Trailer, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return nil, fmt.Errorf("container: malformed call trailer %q", s)
	}
	code, err1 := strconv.Atoi(f[0])
	oom, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("container: malformed call trailer %q", s)
	}
	t := &Trailer{ExitCode: code, OOMKills: oom}
	switch f[2] {
	case "-":
	case StopTerm, StopLost, StopDeadline, StopUnwatched:
		t.Stop = f[2]
	default:
		return nil, fmt.Errorf("container: malformed call trailer %q", s)
	}
	return t, nil
}
