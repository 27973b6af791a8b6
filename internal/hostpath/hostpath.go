// Package hostpath translates the paths sandbash sees into the paths the
// container engine sees, for a sandbash that runs inside a container and
// talks to the host's engine ("docker-outside-of-docker": a devcontainer
// given the engine's socket, with the workspace bind-mounted from another
// host path, /home/me/proj on the host at /workspaces/proj inside).
//
// The engine resolves a bind mount's source on its own host, so a
// container sandbash creates must be given host paths: this package finds
// the container sandbash runs in (its id in /proc/self/mountinfo, else
// /proc/self/cgroup), asks the engine for that container's mounts (an
// inspector each engine provides), and maps a path to the host path of
// the mount with the longest destination that holds it. A path on no
// mount from the host (the container's own filesystem, a tmpfs, a mount
// made inside the container) has no host path: [Map.Host] refuses it.
package hostpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Mount is one mount of a container as its engine reports it: Source on
// the engine's host, Destination inside the container.
type Mount struct {
	Source, Destination string
}

// Inspector returns the mounts of container id as the engine reports
// them; found is false, with a nil error, when the engine has no such
// container.
type Inspector func(ctx context.Context, id string) (mounts []Mount, found bool, err error)

// Map is the container sandbash runs in, and its mounts from the host.
type Map struct {
	// ID is the container's id.
	ID     string
	mounts []Mount // longest destination first
}

// ErrNotOnHost is wrapped by Map.Host's error for a path that no mount
// from the engine's host holds.
var ErrNotOnHost = errors.New("not on a mount from the engine's host")

// Detect finds the container this process runs in and, when the engine
// inspect talks to knows it, returns its mounts. It returns nil, nil when
// this process runs in no container it can name, or in one the engine
// does not know (an engine inside the same container, or elsewhere):
// paths then mean to the engine what they mean here, as on a host.
func Detect(ctx context.Context, inspect Inspector) (*Map, error) {
	id := Self()
	if id == "" {
		return nil, nil
	}
	mounts, found, err := inspect(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("sandbash runs in container %.12s: asking the engine for that container's mounts (to give it host paths): %w", id, err)
	}
	if !found {
		return nil, nil
	}
	return New(id, mounts), nil
}

// New returns the map of container id with mounts.
func New(id string, mounts []Mount) *Map {
	m := &Map{ID: id}
	for _, mt := range mounts {
		if mt.Source == "" || !filepath.IsAbs(mt.Destination) {
			continue
		}
		m.mounts = append(m.mounts, Mount{Source: filepath.Clean(mt.Source), Destination: filepath.Clean(mt.Destination)})
	}
	sort.SliceStable(m.mounts, func(i, j int) bool { return len(m.mounts[i].Destination) > len(m.mounts[j].Destination) })
	return m
}

// Host returns the engine host's path of p, an absolute, clean path as
// this process sees it. A nil Map returns p.
func (m *Map) Host(p string) (string, error) {
	if m == nil {
		return p, nil
	}
	for _, mt := range m.mounts {
		if p == mt.Destination {
			return mt.Source, nil
		}
		rest, ok := strings.CutPrefix(p, mt.Destination+"/")
		if mt.Destination == "/" {
			rest, ok = strings.TrimPrefix(p, "/"), true
		}
		if ok {
			return filepath.Join(mt.Source, rest), nil
		}
	}
	var under []string
	for _, mt := range m.mounts {
		under = append(under, mt.Destination)
	}
	sort.Strings(under)
	return "", fmt.Errorf("%s is %w: sandbash runs in container %.12s and the engine outside it can mount only what is on its host, and this path is on the container's own filesystem (or a mount made inside it); put it under one of the container's mounts from the host (%s), or mount it into the container from the host",
		p, ErrNotOnHost, m.ID, strings.Join(under, ", "))
}

// Mounts are the container's mounts, longest destination first.
func (m *Map) Mounts() []Mount { return m.mounts }

var (
	// A container's id in the path of its engine's files that it mounts
	// (/etc/hostname, /etc/hosts, /etc/resolv.conf): Docker's
	// /var/lib/docker/containers/<id>/, Podman's
	// .../overlay-containers/<id>/userdata/.
	mountinfoID = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`/(?:containers|overlay-containers)/([0-9a-f]{64})/`)
	})
	// The same in a cgroup path: docker/<id>, docker-<id>.scope,
	// libpod-<id>.scope.
	cgroupID = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`(?:docker|libpod)[-/]([0-9a-f]{64})(?:\.scope)?(?:/|$)`)
	})
)

// Self is the id of the container this process runs in, from
// /proc/self/mountinfo, else /proc/self/cgroup; "" when neither names one.
func Self() string {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	cg, _ := os.ReadFile("/proc/self/cgroup")
	return selfID(mi, cg)
}

func selfID(mountinfo, cgroup []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// Fields: id parent major:minor root mountpoint ...; the
		// engine's file is the root, mounted at /etc/hostname.
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		switch f[4] {
		case "/etc/hostname", "/etc/hosts", "/etc/resolv.conf":
			if m := mountinfoID().FindStringSubmatch(f[3]); m != nil {
				return m[1]
			}
		}
	}
	for _, line := range strings.Split(string(cgroup), "\n") {
		if m := cgroupID().FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}
