package seccomp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"sync"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Instructions is the filter for the native architecture: the guard that
// refuses other architectures, then the rules compiled by go-seccomp-bpf,
// which allows what they do not refuse.
func Instructions() ([]bpf.Instruction, error) { return compiled() }

// Program is [Instructions] as the kernel and bubblewrap's --seccomp take it:
// struct sock_filter entries in native byte order.
func Program() ([]byte, error) { return encoded() }

var compiled = sync.OnceValues(func() ([]bpf.Instruction, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: no system call table for %s: %w", runtime.GOARCH, err)
	}
	policy, err := policyFor(info)
	if err != nil {
		return nil, err
	}
	body, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp: compiling the filter: %w", err)
	}
	// go-seccomp-bpf sends a call made through another architecture's ABI
	// to the default action, allow; refuse it before it gets there. And,
	// as Docker's and Podman's allowlists do, answer ENOSYS to system calls
	// newer than the table (x32 numbers included), so a newer kernel's
	// interfaces stay closed until the list has been reviewed against them;
	// libc falls back from ENOSYS.
	maxNr := 0
	for n := range info.SyscallNumbers {
		maxNr = max(maxNr, n)
	}
	guard := []bpf.Instruction{
		bpf.LoadAbsolute{Off: archOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipFalse: 2},
		bpf.LoadAbsolute{Off: nrOffset, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: uint32(maxNr), SkipFalse: 1},
		bpf.RetConstant{Val: retErrno(unix.ENOSYS)},
	}
	prog := append(guard, body...)
	if len(prog) > bpfMaxInstructions {
		return nil, fmt.Errorf("seccomp: the filter has %d instructions, over the kernel's %d", len(prog), bpfMaxInstructions)
	}
	return prog, nil
})

var encoded = sync.OnceValues(func() ([]byte, error) {
	prog, err := compiled()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assembling the filter: %w", err)
	}
	var b bytes.Buffer
	for _, r := range raw {
		// struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }
		_ = binary.Write(&b, binary.NativeEndian, struct {
			Op     uint16
			Jt, Jf uint8
			K      uint32
		}{r.Op, r.Jt, r.Jf, r.K})
	}
	return b.Bytes(), nil
})

const (
	nrOffset           = 0    // offsetof(struct seccomp_data, nr)
	archOffset         = 4    // offsetof(struct seccomp_data, arch)
	bpfMaxInstructions = 4096 // BPF_MAXINSNS
)

func retErrno(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }

// policyFor compiles Rules into one go-seccomp-bpf group per errno, so each
// rule keeps its own errno and every group is tested (go-seccomp-bpf 1.6.0
// fixed the bug that made only the first group reachable).
func policyFor(info *arch.Info) (*libseccomp.Policy, error) {
	groups := map[unix.Errno]*libseccomp.SyscallGroup{}
	var order []unix.Errno
	unconditional := map[string]bool{}
	for _, r := range Rules {
		if r.Errno == 0 {
			return nil, fmt.Errorf("seccomp: rule %v has no errno; a refused call must never look like a success", r)
		}
		g := groups[r.Errno]
		if g == nil {
			g = &libseccomp.SyscallGroup{Action: libseccomp.Action(retErrno(r.Errno))}
			groups[r.Errno] = g
			order = append(order, r.Errno)
		}
		conds, err := conditions(r.When)
		if err != nil {
			return nil, fmt.Errorf("seccomp: rule %v: %w", r, err)
		}
		for _, name := range r.Names {
			if _, ok := info.SyscallNames[name]; !ok {
				continue // not a system call of this architecture
			}
			if len(conds) == 0 {
				g.Names = append(g.Names, name)
				unconditional[name] = true
				continue
			}
			g.NamesWithCondtions = append(g.NamesWithCondtions, libseccomp.NameWithConditions{Name: name, Conditions: conds})
		}
	}
	p := &libseccomp.Policy{DefaultAction: libseccomp.ActionAllow}
	for _, e := range order {
		g := groups[e]
		for _, c := range g.NamesWithCondtions {
			if unconditional[c.Name] {
				return nil, fmt.Errorf("seccomp: %s is refused both always and on conditions", c.Name)
			}
		}
		p.Syscalls = append(p.Syscalls, *g)
	}
	return p, nil
}

// conditions translates a rule's When into go-seccomp-bpf conditions, all
// of which must hold.
func conditions(when []Cond) (libseccomp.ArgumentConditions, error) {
	var out libseccomp.ArgumentConditions
	for _, c := range when {
		if c.Arg < 0 || c.Arg > 5 {
			return nil, fmt.Errorf("argument %d: a system call has arguments 0 to 5", c.Arg)
		}
		a := uint32(c.Arg)
		switch c.Op {
		case AnySet:
			out = append(out, libseccomp.Condition{Argument: a, Operation: libseccomp.BitsSet, Value: c.Value})
		case NotEqual:
			out = append(out, libseccomp.Condition{Argument: a, Operation: libseccomp.NotEqual, Value: c.Value})
		case Equal32:
			if c.Value > 0xffffffff {
				return nil, fmt.Errorf("Equal32 of %#x, which has more than 32 bits", c.Value)
			}
			// The low word equals v when each of v's bits is set and no
			// other bit of the low word is; the high word is not looked at
			// (go-seccomp-bpf tests the high word against the value's, 0).
			v := uint32(c.Value)
			for rest := v; rest != 0; rest &= rest - 1 {
				bit := uint64(1) << bits.TrailingZeros32(rest)
				out = append(out, libseccomp.Condition{Argument: a, Operation: libseccomp.BitsSet, Value: bit})
			}
			out = append(out, libseccomp.Condition{Argument: a, Operation: libseccomp.BitsNotSet, Value: uint64(^v)})
		default:
			return nil, fmt.Errorf("unknown operation %d", c.Op)
		}
	}
	return out, nil
}
