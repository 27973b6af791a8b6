//go:build linux && !amd64

package main

var legacyCalls = map[string]uintptr{}

const (
	haveInt80  = false
	haveX32    = false
	map32bit   = 0
	i386Chmod  = 0
	i386Getuid = 0
	x32Bit     = 0
	x32Getuid  = 0
)

func int80(nr, a1, a2, a3 uintptr) uintptr { panic("no i386 ABI") }
