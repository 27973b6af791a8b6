//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// A filter that does not list an architecture kills the thread that calls
// through it (libseccomp's default for a bad architecture, which runc and
// so Docker and Podman keep). A Go thread killed that way leaves the rest
// of the process waiting for it, so the probe makes such a call in a
// child of its own: a static ELF of a few instructions, single-threaded,
// which exits with the call's errno (0 for success) and dies of SIGSYS
// where the filter kills it.

// errSIGSYS is a call the seccomp filter answered by killing the thread.
var errSIGSYS = errors.New("SIGSYS")

// childBase is where the child's one segment is loaded: below 4 GiB, so
// that the i386 ABI's 32-bit pointers reach its data.
const childBase = 0x400000

// exitWithResult ends the child with the call's result in eax: 0 when it
// is not negative, else its negation (the errno). x86-64, after the call:
//
//	test eax, eax ; jns ok ; neg eax ; mov edi, eax ; jmp out
//	ok: xor edi, edi
//	out: mov eax, 60 (exit) ; syscall
var exitWithResult = []byte{0x85, 0xc0, 0x79, 0x06, 0xf7, 0xd8, 0x89, 0xc7, 0xeb, 0x02, 0x31, 0xff, 0xb8, 0x3c, 0, 0, 0, 0x0f, 0x05}

// int80Code makes i386 system call nr with up to three 32-bit arguments:
// mov eax/ebx/ecx/edx, imm32 ; int 0x80.
func int80Code(nr uint32, args ...uint32) []byte {
	var b bytes.Buffer
	b.WriteByte(0xb8)
	binary.Write(&b, binary.LittleEndian, nr)
	for i, op := range []byte{0xbb, 0xb9, 0xba} {
		var a uint32
		if i < len(args) {
			a = args[i]
		}
		b.WriteByte(op)
		binary.Write(&b, binary.LittleEndian, a)
	}
	b.Write([]byte{0xcd, 0x80})
	return b.Bytes()
}

// syscallCode makes native system call nr (with the x32 bit, an x32 one)
// with no arguments: mov eax, imm32 ; syscall.
func syscallCode(nr uint32) []byte {
	var b bytes.Buffer
	b.WriteByte(0xb8)
	binary.Write(&b, binary.LittleEndian, nr)
	b.Write([]byte{0x0f, 0x05})
	return b.Bytes()
}

const (
	ehSize = 64
	phSize = 56
	// childData is the address of the data that follows the code, which
	// is padded to codeMax bytes.
	codeMax   = 64
	childData = childBase + ehSize + phSize + codeMax
)

// childELF is a static x86-64 executable: code, then exitWithResult, with
// data (a path, say) at childData.
func childELF(code, data []byte) []byte {
	text := append(append([]byte{}, code...), exitWithResult...)
	if len(text) > codeMax {
		panic("probe: child code too long")
	}
	text = append(text, make([]byte, codeMax-len(text))...)
	size := uint64(ehSize + phSize + len(text) + len(data))
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	binary.Write(&b, le, uint16(2))    // ET_EXEC
	binary.Write(&b, le, uint16(0x3e)) // EM_X86_64
	binary.Write(&b, le, uint32(1))    // EV_CURRENT
	binary.Write(&b, le, uint64(childBase+ehSize+phSize))
	binary.Write(&b, le, uint64(ehSize)) // program headers
	binary.Write(&b, le, uint64(0))      // no section headers
	binary.Write(&b, le, uint32(0))
	for _, v := range []uint16{ehSize, phSize, 1, 0, 0, 0} {
		binary.Write(&b, le, v)
	}
	binary.Write(&b, le, uint32(1)) // PT_LOAD
	binary.Write(&b, le, uint32(5)) // PF_R|PF_X
	for _, v := range []uint64{0, childBase, childBase, size, size, 0x1000} {
		binary.Write(&b, le, v)
	}
	b.Write(text)
	b.Write(data)
	return b.Bytes()
}

// runChild runs the executable image in a child and returns the call's
// result: nil, its errno, errSIGSYS, or an error saying it hung.
func runChild(image []byte) error {
	f, err := os.CreateTemp("", "sbprobe-abi-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(image)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o700)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, f.Name())
	err = c.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("the child hung")
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() && ws.Signal() == syscall.SIGSYS {
			return errSIGSYS
		}
		if ws.Exited() {
			return syscall.Errno(ws.ExitStatus())
		}
	}
	return fmt.Errorf("the child: %v", err)
}
