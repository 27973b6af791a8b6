package bwrap

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Every user on the host can read every process's argv (/proc/PID/cmdline,
// ps), the sandbox's processes included: they are host processes. So no
// host process carries a call's command, its environment or its paths in
// argv:
//
//   - sandbash starts bwrap (or nsenter, which becomes bwrap) itself, born
//     in the call's cgroups (see callCgroup.enterThread). Where it cannot
//     be born in all of them, a launcher (bash running launcherScript)
//     starts instead, waits until sandbash has put it in the rest, and
//     becomes bwrap. Their argv is fixed text, numbers and the helpers'
//     paths;
//   - bwrap reads all its options, the environment's --setenv included,
//     from a memfd (--args FD);
//   - bash gets `-c` and a fixed script (readerScript) that sets the
//     call's rlimits, reads the command from another memfd, closes every
//     descriptor but 0, 1 and 2, and evals the command; the script's only
//     variable parts are numbers, the limits.
//
// Go closes none of the descriptors sandbash inherited without
// close-on-exec: they reach bwrap, whose own processes close them (its
// monitor and the sandbox's init), and the command's bash, which closes
// them before anything of the call runs.
//
// The rlimits are set inside the sandbox, by the bash that runs the
// command, before it reads it: a process lowers its own limits without
// privilege, and nothing in the sandbox can raise a hard limit again (that
// takes CAP_SYS_RESOURCE in the host's user namespace). bwrap's own two
// processes, which run no code of the call, are not under them.
//
// eval of the exact bytes in the top-level shell is `bash -c` for every
// purpose the conformance suite and agents rely on: the same parser
// (bash runs -c strings and eval strings alike, one complete command at a
// time), exit statuses, `exit`, `exec`, traps, $0, $#, $$, $LINENO, and
// $BASH_EXECUTION_STRING, which the script sets to the command as -c does.
// The script's own traces are gone before the command runs ($? is 0, $_ is
// $BASH as under -c, no variable or function of its own is left). What
// differs: a syntax error reads "bash: eval: ..." instead of "bash: -c: line
// N: ...", and bash cannot exec the last simple command in place of itself,
// so one more process (bash) stays while it runs. A file in the sandbox
// (bwrap --file) would have done as well as the descriptor; the descriptor
// leaves nothing behind for the command to find.

// launcherScript runs as `bash -c launcherScript sandbash-launch PROGRAM
// ARGS...` with the go-ahead pipe on fd 3.
const launcherScript = `read -r go <&3 || exit 125
exec 3<&-
exec "$@"`

// rlimits are the limits the command's bash sets on itself; 0 leaves one
// as it is.
type rlimits struct {
	fsize, data int64 // bytes
	nproc       int64 // processes and threads
}

// ulimit is the bash command that sets l, or "" if there is nothing to set.
// bash takes file and data sizes in KiB: a limit rounds down to a whole
// KiB (at least 1).
func (l rlimits) ulimit() string {
	var opts []string
	kib := func(b int64) string { return strconv.FormatInt(max(b/1024, 1), 10) }
	if l.fsize > 0 {
		opts = append(opts, "-f", kib(l.fsize))
	}
	if l.data > 0 {
		opts = append(opts, "-d", kib(l.data))
	}
	if l.nproc > 0 {
		opts = append(opts, "-u", strconv.FormatInt(l.nproc, 10))
	}
	if len(opts) == 0 {
		return ""
	}
	return "ulimit " + strings.Join(opts, " ")
}

// closeOthers closes every descriptor of the shell above 2, through a
// function that is gone (and whose local variable never touched the
// command's) before the command runs.
const closeOthers = `__sandbash_close() { local f; for f in /proc/self/fd/*; do f=${f##*/}; if [ "$f" -gt 2 ]; then { exec {f}<&-; } 2>/dev/null; fi; done; }; __sandbash_close; unset -f __sandbash_close; `

// readerScript is bash's -c script: it sets the call's rlimits (and runs
// nothing if it cannot), takes the command from fd, closes every other
// descriptor, and runs the command as `bash -c` would.
func readerScript(fd int, l rlimits) string {
	s := fmt.Sprintf(`IFS= read -r -d '' BASH_EXECUTION_STRING <&%d; exec %d<&-; %s: "$BASH"; eval "$BASH_EXECUTION_STRING"`, fd, fd, closeOthers)
	if u := l.ulimit(); u != "" {
		s = u + ` || exit 125; ` + s
	}
	return s
}

// launch is one call's bwrap invocation as Start puts it together: the
// files the started program inherits (fd 3, 4, ... in order) and bwrap's
// options. Files passed with pass are closed in sandbash once it started
// (or failed to); those passed with lend stay open.
type launch struct {
	files []*os.File
	lent  int // how many of files, from the start, are lent
	opts  []string
}

// pass gives f to the started program, and through it to bwrap, and
// returns its descriptor number there.
func (l *launch) pass(f *os.File) int {
	l.files = append(l.files, f)
	return 2 + len(l.files)
}

// lend passes f as pass does, but leaves it open; lend files before
// passing any.
func (l *launch) lend(f *os.File) int {
	if l.lent != len(l.files) {
		panic("bwrap: launch.lend after pass")
	}
	l.lent++
	return l.pass(f)
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

// args returns the arguments, after prefix (bwrap's, or nsenter's that
// lead to bwrap), that run bwrap with l's options and command, passing the
// options and the command as memfds; lim goes to readerScript.
func (l *launch) args(prefix []string, command string, lim rlimits) ([]string, error) {
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
	a := append([]string(nil), prefix...)
	return append(a, "--args", strconv.Itoa(optsFD), "bash", "-c", readerScript(cmdFD, lim)), nil
}

// launcherArgs are the arguments of bash that run launcherScript, which
// runs program args... once the go-ahead pipe (passed first, on fd 3)
// says so.
func launcherArgs(program string, args []string) []string {
	return append([]string{"-c", launcherScript, "sandbash-launch", program}, args...)
}

// closeFiles closes sandbash's copies of the passed files, not the lent
// ones.
func (l *launch) closeFiles() {
	for _, f := range l.files[l.lent:] {
		f.Close()
	}
	l.files, l.lent = nil, 0
}
