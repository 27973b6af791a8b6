//go:build linux

package main

import "golang.org/x/sys/unix"

// legacyCalls are the system calls amd64 kept from before the *at family.
var legacyCalls = map[string]uintptr{
	"open": unix.SYS_OPEN, "creat": unix.SYS_CREAT, "chmod": unix.SYS_CHMOD,
	"mkdir": unix.SYS_MKDIR, "mknod": unix.SYS_MKNOD,
}

const (
	haveInt80  = true
	haveX32    = true
	map32bit   = unix.MAP_32BIT
	i386Chmod  = 15 // arch/x86/entry/syscalls/syscall_32.tbl
	i386Getuid = 24 // getuid16 there; it still reads the uid
	x32Bit     = 0x40000000
	x32Getuid  = 102
)

// int80 makes an i386 system call through int 0x80 (int80_amd64.s).
func int80(nr, a1, a2, a3 uintptr) uintptr
