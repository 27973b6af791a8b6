//go:build linux && !amd64

package main

var legacyCalls = map[string]uintptr{}

const (
	haveInt80  = false
	haveX32    = false
	i386Chmod  = 0
	i386Getuid = 0
	x32Bit     = 0
	x32Getuid  = 0
)
