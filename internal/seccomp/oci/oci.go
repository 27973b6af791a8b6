// Package oci is the Docker/OCI JSON seccomp profile format that Docker and
// Podman read, and Podman's default profile in it: the types and
// DefaultProfile of go.podman.io/common/pkg/seccomp (SPDX-License-Identifier:
// Apache-2.0; Copyright 2013-2018 Docker, Inc.), without that module, which
// sandbash no longer links. The profile is that package's DefaultProfile as
// JSON (default.json); TestDefaultProfile checks that it still is, and
// rewrites it with SANDBASH_UPDATE_SECCOMP=1.
package oci

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// Seccomp is a seccomp profile.
type Seccomp struct {
	DefaultAction Action `json:"defaultAction"`
	// DefaultErrnoRet is obsolete: DefaultErrno names it.
	DefaultErrnoRet  *uint          `json:"defaultErrnoRet,omitempty"`
	DefaultErrno     string         `json:"defaultErrno,omitempty"`
	Architectures    []Arch         `json:"architectures,omitempty"`
	ArchMap          []Architecture `json:"archMap,omitempty"`
	Syscalls         []*Syscall     `json:"syscalls"`
	Flags            []string       `json:"flags,omitempty"`
	ListenerPath     string         `json:"listenerPath,omitempty"`
	ListenerMetadata string         `json:"listenerMetadata,omitempty"`
}

// Architecture is an architecture and the ones it also runs.
type Architecture struct {
	Arch      Arch   `json:"architecture"`
	SubArches []Arch `json:"subArchitectures"`
}

// Arch is an architecture, as libseccomp names it.
type Arch string

// The architectures sandbash names.
const (
	ArchX86_64  Arch = "SCMP_ARCH_X86_64"
	ArchAARCH64 Arch = "SCMP_ARCH_AARCH64"
	ArchS390X   Arch = "SCMP_ARCH_S390X"
	ArchPPC64LE Arch = "SCMP_ARCH_PPC64LE"
	ArchRISCV64 Arch = "SCMP_ARCH_RISCV64"
)

// Action is what a matching system call gets.
type Action string

// The actions sandbash uses.
const (
	ActErrno Action = "SCMP_ACT_ERRNO"
	ActAllow Action = "SCMP_ACT_ALLOW"
)

// Operator compares a system call's argument.
type Operator string

// The comparisons.
const (
	OpNotEqual     Operator = "SCMP_CMP_NE"
	OpLessThan     Operator = "SCMP_CMP_LT"
	OpLessEqual    Operator = "SCMP_CMP_LE"
	OpEqualTo      Operator = "SCMP_CMP_EQ"
	OpGreaterEqual Operator = "SCMP_CMP_GE"
	OpGreaterThan  Operator = "SCMP_CMP_GT"
	OpMaskedEqual  Operator = "SCMP_CMP_MASKED_EQ"
)

// Arg is a condition on the argument at Index.
type Arg struct {
	Index    uint     `json:"index"`
	Value    uint64   `json:"value"`
	ValueTwo uint64   `json:"valueTwo"`
	Op       Operator `json:"op"`
}

// Filter selects entries by capability or architecture.
type Filter struct {
	Caps   []string `json:"caps,omitempty"`
	Arches []string `json:"arches,omitempty"`
}

// Syscall is an entry: what the system calls Names get, under Args.
type Syscall struct {
	Name     string   `json:"name,omitempty"`
	Names    []string `json:"names,omitempty"`
	Action   Action   `json:"action"`
	Args     []*Arg   `json:"args"`
	Comment  string   `json:"comment"`
	Includes Filter   `json:"includes"`
	Excludes Filter   `json:"excludes"`
	// ErrnoRet is the errno Errno names, on the architecture sandbash is
	// built for.
	ErrnoRet *uint  `json:"errnoRet,omitempty"`
	Errno    string `json:"errno,omitempty"`
}

//go:embed default.json
var defaultJSON []byte

// DefaultProfile returns a fresh copy of Podman's default profile, with
// every errno number that of its name on this architecture.
func DefaultProfile() (*Seccomp, error) {
	var p Seccomp
	if err := json.Unmarshal(defaultJSON, &p); err != nil {
		return nil, fmt.Errorf("seccomp: reading Podman's default profile: %w", err)
	}
	var err error
	if p.DefaultErrnoRet, err = errnoOf(p.DefaultErrno, p.DefaultErrnoRet); err != nil {
		return nil, err
	}
	for _, s := range p.Syscalls {
		if s.ErrnoRet, err = errnoOf(s.Errno, s.ErrnoRet); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

// errnoOf is the number of the errno name ("" keeps ret).
func errnoOf(name string, ret *uint) (*uint, error) {
	if name == "" {
		return ret, nil
	}
	for e := syscall.Errno(1); e < 4096; e++ {
		if unix.ErrnoName(e) == name {
			v := uint(e)
			return &v, nil
		}
	}
	return nil, fmt.Errorf("seccomp: unknown errno %s in Podman's default profile", name)
}
