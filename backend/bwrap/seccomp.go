package bwrap

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/backend"
	"github.com/sandbash/sandbash/internal/seccomp"
)

// seccompFile returns a sealed memfd holding sandbash's seccomp filter
// (package internal/seccomp) for one bwrap, which reads it to the end
// before it runs the command. The caller closes it once bwrap has started.
// A memfd rather than a pipe: a pipe's buffer can be one page for a user
// over fs.pipe-user-pages-soft, and writing the filter into it would block.
func seccompFile() (*os.File, error) {
	prog, err := seccomp.Program()
	if err != nil {
		return nil, fmt.Errorf("bwrap: %v: %w", err, backend.ErrUnavailable)
	}
	fd, err := unix.MemfdCreate("sandbash-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("bwrap: creating a memfd for the seccomp filter: %w", err)
	}
	f := os.NewFile(uintptr(fd), "sandbash-seccomp")
	if _, err := f.Write(prog); err != nil {
		f.Close()
		return nil, fmt.Errorf("bwrap: writing the seccomp filter: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		f.Close()
		return nil, fmt.Errorf("bwrap: sealing the seccomp filter: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// seccompInfo describes the filter for Info.
func seccompInfo() string {
	prog, err := seccomp.Instructions()
	if err != nil {
		return "unavailable: " + err.Error()
	}
	return fmt.Sprintf("sandbash's filter in force on every call (%d BPF instructions): %s", len(prog), seccomp.Summary())
}
