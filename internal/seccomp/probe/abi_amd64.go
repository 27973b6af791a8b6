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
	i386Chmod  = 15 // arch/x86/entry/syscalls/syscall_32.tbl
	i386Getuid = 24 // getuid16 there; it still reads the uid
	x32Bit     = 0x40000000
	x32Getuid  = 102
)
