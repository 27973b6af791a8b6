package seccomp

import (
	"encoding/json"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/internal/seccomp/oci"
)

// Profile is the seccomp profile for container backends, in the JSON format
// Docker (HostConfig.SecurityOpt "seccomp=<JSON>") and Podman
// (SpecGenerator.SeccompProfilePath) read: Podman's default profile, an
// allowlist, with every system call of [Rules] taken out of its entries
// and given entries of sandbash's own. A call a rule refuses always gets
// the rule's errno; a conditional rule becomes ERRNO entries for the
// argument values it refuses and ALLOW entries for the rest, each entry
// comparing an argument once (runc splits an entry that compares one
// argument twice into entries that are OR'd, which would invert a NE test).
// Rules with BwrapOnly set are left to the base profile. It allows the
// native ABI only (see buildProfile).
func Profile() ([]byte, error) { return profile() }

var profile = sync.OnceValues(func() ([]byte, error) {
	p, err := buildProfile()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("seccomp: encoding the container profile: %w", err)
	}
	return b, nil
})

// s390Arg: on s390 and s390x clone takes its flags second.
var s390Arg = map[string]map[int]int{"clone": {0: 1}}

func buildProfile() (*oci.Seccomp, error) {
	p, err := oci.DefaultProfile()
	if err != nil {
		return nil, err
	}
	owned := map[string]bool{}
	for _, r := range Rules {
		if r.BwrapOnly == "" {
			for _, n := range r.Names {
				owned[n] = true
			}
		}
	}
	// Take sandbash's system calls out of every base entry, allow or errno,
	// whatever capability it depends on.
	var kept []*oci.Syscall
	for _, s := range p.Syscalls {
		names := s.Names
		if s.Name != "" {
			names = append(names, s.Name)
		}
		names = slices.DeleteFunc(slices.Clone(names), func(n string) bool { return owned[n] })
		if len(names) == 0 {
			continue
		}
		c := *s
		c.Name, c.Names = "", names
		kept = append(kept, &c)
	}
	conditional := map[string]bool{}
	for _, r := range Rules {
		if r.BwrapOnly != "" {
			continue
		}
		errno := uint(r.Errno)
		name := unix.ErrnoName(r.Errno)
		if name == "" || r.Errno == 0 {
			return nil, fmt.Errorf("seccomp: rule %v: errno %d has no name", r, r.Errno)
		}
		for _, n := range r.Names {
			if s390Arg[n] != nil && len(r.Names) > 1 {
				return nil, fmt.Errorf("seccomp: rule %v: give %s a rule of its own (its arguments move on s390)", r, n)
			}
		}
		deny := func(args []*oci.Arg) *oci.Syscall {
			return &oci.Syscall{Names: slices.Clone(r.Names), Action: oci.ActErrno, ErrnoRet: &errno, Errno: name, Args: args, Comment: "sandbash: " + r.What}
		}
		if len(r.When) == 0 {
			kept = append(kept, deny([]*oci.Arg{}))
			continue
		}
		for _, n := range r.Names {
			if conditional[n] {
				return nil, fmt.Errorf("seccomp: %s has two conditional rules; their complement is not an allowlist entry", n)
			}
			conditional[n] = true
		}
		// Refused: every condition holds. AnySet(m) holds when one of m's
		// bits is set, so the ERRNO entries are every choice of one bit per
		// condition. Allowed: some condition fails, one ALLOW entry each.
		choices := [][]*oci.Arg{{}}
		var allows []*oci.Syscall
		for _, c := range r.When {
			if c.Op != AnySet {
				return nil, fmt.Errorf("seccomp: rule %v: only AnySet conditions have a container profile form; mark it BwrapOnly", r)
			}
			var next [][]*oci.Arg
			for rest := c.Value; rest != 0; rest &= rest - 1 {
				bit := uint64(1) << bits.TrailingZeros64(rest)
				for _, ch := range choices {
					next = append(next, append(slices.Clone(ch), &oci.Arg{Index: uint(c.Arg), Op: oci.OpMaskedEqual, Value: bit, ValueTwo: bit}))
				}
			}
			choices = next
			allows = append(allows, &oci.Syscall{Names: slices.Clone(r.Names), Action: oci.ActAllow,
				Args: []*oci.Arg{{Index: uint(c.Arg), Op: oci.OpMaskedEqual, Value: c.Value, ValueTwo: 0}}, Comment: "sandbash: all but " + r.What})
		}
		entries := allows
		for _, ch := range choices {
			entries = append(entries, deny(ch))
		}
		for _, e := range entries {
			kept = append(kept, forArches(e)...)
		}
	}
	p.Syscalls = kept
	// Only the native ABI: no sub-architecture (i386 and x32 on amd64,
	// AArch32 on arm64). The rules then hold for one system call table,
	// and the compat entry points, a rich source of kernel bugs, are
	// closed, as bwrap's filter closes them. A call through another ABI
	// meets libseccomp's bad-architecture action, which runc keeps: the
	// thread is killed (SIGSYS). It also makes the profile about a tenth
	// as costly to compile, which runc does for every container (libseccomp
	// took 11% of the CPU of back-to-back calls on Podman with the three
	// x86 ABIs).
	for i := range p.ArchMap {
		p.ArchMap[i].SubArches = nil
	}
	return p, nil
}

// forArches returns e, split in two when its system call (alone in e) takes
// the tested argument at another index on s390.
func forArches(e *oci.Syscall) []*oci.Syscall {
	if s390Arg[e.Names[0]] == nil {
		return []*oci.Syscall{e}
	}
	moved := *e
	moved.Args = nil
	for _, a := range e.Args {
		m := *a
		if i, ok := s390Arg[e.Names[0]][int(a.Index)]; ok {
			m.Index = uint(i)
		}
		moved.Args = append(moved.Args, &m)
	}
	s390 := []string{"s390", "s390x"}
	e.Excludes.Arches = s390
	moved.Includes.Arches = s390
	return []*oci.Syscall{e, &moved}
}

// ProfileSummary describes [Profile] in one line, for `sandbash doctor`.
func ProfileSummary() string {
	return "Podman's default allowlist, narrowed: " + summary(false)
}
