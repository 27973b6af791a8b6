package bwrap

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Every user on the host can read every process's argv (/proc/PID/cmdline,
// ps), the sandbox's processes included: they are host processes. So no
// host process carries a call's command, its environment or its paths in
// argv:
//
//   - a launcher (bash running launcherScript) waits until sandbash has
//     put it in the call's cgroups, closes every descriptor it was not
//     meant to pass on (Go closes none that sandbash inherited without
//     close-on-exec), and becomes prlimit, which sets the call's rlimits
//     (if it has any) and becomes bwrap (or nsenter, which becomes bwrap):
//     their argv is fixed text, numbers and the helpers' paths;
//   - bwrap reads all its options, the environment's --setenv included,
//     from a memfd (--args FD);
//   - bash gets `-c` and a fixed script (readerScript) that reads the
//     command from another memfd, closes it, and evals it; the script's
//     only variable part is a number, the process limit it may set.
//
// eval of the exact bytes in the top-level shell is `bash -c` for every
// purpose the conformance suite and agents rely on: the same parser
// (bash runs -c strings and eval strings alike, one complete command at a
// time), exit statuses, `exit`, `exec`, traps, $0, $#, $$, $LINENO, and
// $BASH_EXECUTION_STRING, which the script sets to the command as -c does.
// The script's own traces are gone before the command runs ($? is 0, $_ is
// $BASH as under -c). What differs: a syntax error reads "bash: eval: ..."
// instead of "bash: -c: line N: ...", and bash cannot exec the last simple
// command in place of itself, so one more process (bash) stays while it runs.
// A file in the sandbox (bwrap --file) would have done as well as the
// descriptor; the descriptor leaves nothing behind for the command to find.

// launcherScript runs as `bash -c launcherScript sandbash-launch N
// PROGRAM ARGS...` with the go-ahead pipe on fd 3 and the files to pass on
// below fd N.
const launcherScript = `read -r go <&3 || exit 125
for fd in /proc/self/fd/*; do
  fd=${fd##*/}
  if [ "$fd" = 3 ] || [ "$fd" -ge "$1" ]; then { exec {fd}<&-; } 2>/dev/null; fi
done
shift
exec "$@"`

// readerScript is bash's -c script: it takes the command from fd and runs
// it as `bash -c` would. If nproc is not 0, it first sets RLIMIT_NPROC
// (soft and hard) in the sandbox's user namespace, and runs nothing if it
// cannot.
func readerScript(fd int, nproc int64) string {
	s := fmt.Sprintf(`IFS= read -r -d '' BASH_EXECUTION_STRING <&%d; exec %d<&-; : "$BASH"; eval "$BASH_EXECUTION_STRING"`, fd, fd)
	if nproc > 0 {
		s = fmt.Sprintf(`ulimit -u %d || exit 125; `, nproc) + s
	}
	return s
}

// launch is one call's bwrap invocation as Start puts it together: the
// files the launcher inherits (fd 3, 4, ... in order) and bwrap's options.
// Files passed with pass are closed in sandbash once the launcher started.
type launch struct {
	files []*os.File
	opts  []string
}

// pass gives f to the launcher, and through it to bwrap, and returns its
// descriptor number there.
func (l *launch) pass(f *os.File) int {
	l.files = append(l.files, f)
	return 2 + len(l.files)
}

// passData passes data as a memfd (a file in memory, never on disk,
// readable only through the descriptor) positioned at its start.
func (l *launch) passData(name string, data []byte) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return 0, fmt.Errorf("bwrap: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return 0, fmt.Errorf("bwrap: writing %s: %w", name, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return 0, err
	}
	return l.pass(f), nil
}

// argv returns the launcher's arguments for running program prefix...
// bwrap with l's options and command, passing the options and the command
// as memfds; nproc goes to readerScript.
func (l *launch) argv(program string, prefix []string, command string, nproc int64) ([]string, error) {
	// bash's read stops at the NUL, which a command cannot contain.
	cmdFD, err := l.passData("sandbash-command", append([]byte(command), 0))
	if err != nil {
		return nil, err
	}
	var opts bytes.Buffer
	for _, o := range l.opts {
		opts.WriteString(o)
		opts.WriteByte(0)
	}
	optsFD, err := l.passData("sandbash-bwrap-args", opts.Bytes())
	if err != nil {
		return nil, err
	}
	a := []string{"-c", launcherScript, "sandbash-launch", strconv.Itoa(3 + len(l.files)), program}
	a = append(a, prefix...)
	return append(a, "--args", strconv.Itoa(optsFD), "bash", "-c", readerScript(cmdFD, nproc)), nil
}

// closeFiles closes sandbash's copies of the passed files.
func (l *launch) closeFiles() {
	for _, f := range l.files {
		f.Close()
	}
}
