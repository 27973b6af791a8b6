package bwrap

import "os"

// MayBeRestricted reports whether a one-shot backend runs its probe on
// this host (mayBeRestricted), for the external tests.
func MayBeRestricted() bool { return mayBeRestricted("/", os.Geteuid()) }
