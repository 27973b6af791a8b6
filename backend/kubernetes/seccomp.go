package kubernetes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/sandbash/sandbash/internal/seccomp"
	"github.com/sandbash/sandbash/internal/seccomp/oci"
)

// SeccompProfile returns the seccomp profile call pods run under (the
// container backends' profile of package internal/seccomp, for a
// container with no capabilities, in the OCI form the kubelet hands the
// runtime for a Localhost profile) and the name under which it must be in
// the kubelet's seccomp directory on every node that runs calls
// (<kubelet root>/seccomp/NAME; the name holds the profile's digest, so a
// sandbash with another profile never uses a stale file). The runtime's
// default profile (RuntimeDefault) lets io_uring and more through, which
// the other backends refuse; a node without the file fails the pod, and
// the call, saying that the profile is missing.
func SeccompProfile() (name string, body []byte, err error) {
	b, err := profile()
	if err != nil {
		return "", nil, err
	}
	sum := sha256.Sum256(b)
	return "sandbash/seccomp-" + hex.EncodeToString(sum[:6]) + ".json", b, nil
}

var profile = sync.OnceValues(func() ([]byte, error) {
	src, err := seccomp.Profile()
	if err != nil {
		return nil, err
	}
	var p oci.Seccomp
	if err := json.Unmarshal(src, &p); err != nil {
		return nil, err
	}
	return toOCI(&p, runtime.GOARCH)
})

// seccompArch maps GOARCH to the profile's native architecture.
var seccompArch = map[string]oci.Arch{"amd64": oci.ArchX86_64, "arm64": oci.ArchAARCH64, "s390x": oci.ArchS390X, "ppc64le": oci.ArchPPC64LE, "riscv64": oci.ArchRISCV64}

// toOCI turns the profile into the runtime spec's form for a container on
// arch with no capabilities, as Podman does when it reads one (package
// go.podman.io/common/pkg/seccomp, which needs cgo's libseccomp for it): an
// entry for some capabilities is left out, one for all but some is kept;
// entries for other architectures are left out.
func toOCI(p *oci.Seccomp, arch string) ([]byte, error) {
	out := specs.LinuxSeccomp{DefaultAction: specs.LinuxSeccompAction(p.DefaultAction)}
	var err error
	if out.DefaultErrnoRet, err = errnoOf(p.DefaultErrno, p.DefaultErrnoRet); err != nil {
		return nil, err
	}
	native, ok := seccompArch[arch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no profile for architecture %s", arch)
	}
	for _, a := range p.ArchMap {
		if a.Arch == native {
			out.Architectures = append(out.Architectures, specs.Arch(a.Arch))
			for _, sa := range a.SubArches {
				out.Architectures = append(out.Architectures, specs.Arch(sa))
			}
		}
	}
	for _, c := range p.Syscalls {
		if len(c.Includes.Caps) > 0 || slices.Contains(c.Excludes.Arches, arch) ||
			(len(c.Includes.Arches) > 0 && !slices.Contains(c.Includes.Arches, arch)) {
			continue
		}
		names := c.Names
		if c.Name != "" {
			names = append([]string{c.Name}, names...)
		}
		sc := specs.LinuxSyscall{Names: names, Action: specs.LinuxSeccompAction(c.Action)}
		if sc.ErrnoRet, err = errnoOf(c.Errno, c.ErrnoRet); err != nil {
			return nil, err
		}
		for _, a := range c.Args {
			sc.Args = append(sc.Args, specs.LinuxSeccompArg{Index: a.Index, Value: a.Value, ValueTwo: a.ValueTwo, Op: specs.LinuxSeccompOperator(a.Op)})
		}
		out.Syscalls = append(out.Syscalls, sc)
	}
	return json.Marshal(out)
}

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
	return nil, fmt.Errorf("seccomp: unknown errno %s", name)
}
