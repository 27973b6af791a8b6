package hostpath

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const id = "3f1c2d4e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d"

func TestSelfID(t *testing.T) {
	for _, c := range []struct {
		name, mountinfo, cgroup, want string
	}{
		{"docker", "1021 1003 0:52 / / rw - overlay overlay rw\n" +
			"1030 1021 259:1 /var/lib/docker/containers/" + id + "/hostname /etc/hostname rw,relatime - ext4 /dev/root rw\n", "", id},
		{"podman", "612 600 259:1 /var/lib/containers/storage/overlay-containers/" + id + "/userdata/hosts /etc/hosts rw - ext4 /dev/root rw\n", "", id},
		// A workspace that merely has such a path is not the engine's
		// file at /etc/hostname.
		{"not at /etc", "1030 1021 259:1 /home/me/containers/" + id + "/x /workspaces/x rw - ext4 /dev/root rw\n", "", ""},
		{"cgroup v1", "", "12:pids:/docker/" + id + "\n", id},
		{"cgroup podman", "", "0::/machine.slice/libpod-" + id + ".scope/container\n", id},
		{"host", "22 1 259:1 / / rw - ext4 /dev/root rw\n", "0::/user.slice/user-1000.slice/session-2.scope\n", ""},
	} {
		if got := selfID([]byte(c.mountinfo), []byte(c.cgroup)); got != c.want {
			t.Errorf("%s: selfID = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestHost(t *testing.T) {
	m := New(id, []Mount{
		{Source: "/home/me/proj", Destination: "/workspaces/proj"},
		{Source: "/srv/state", Destination: "/var/lib/sb"},
		{Source: "/home/me/proj-data", Destination: "/workspaces/proj/data"},
		{Source: "", Destination: "/anon"}, // no host path: ignored
	})
	for p, want := range map[string]string{
		"/workspaces/proj":                "/home/me/proj",
		"/workspaces/proj/src/main.go":    "/home/me/proj/src/main.go",
		"/workspaces/proj/data":           "/home/me/proj-data",
		"/workspaces/proj/data/x":         "/home/me/proj-data/x",
		"/workspaces/proj/database":       "/home/me/proj/database", // not under data/
		"/var/lib/sb/runs/sandbash-1/tmp": "/srv/state/runs/sandbash-1/tmp",
	} {
		got, err := m.Host(p)
		if err != nil || got != want {
			t.Errorf("Host(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	for _, p := range []string{"/workspaces/projX", "/workspaces", "/tmp/x", "/anon/x", "/", "/etc"} {
		got, err := m.Host(p)
		if !errors.Is(err, ErrNotOnHost) || got != "" {
			t.Errorf("Host(%s) = %q, %v; want a refusal", p, got, err)
		} else if !strings.Contains(err.Error(), "/workspaces/proj") || !strings.Contains(err.Error(), p) {
			t.Errorf("Host(%s): the refusal %q should name the path and the mounts it could be under", p, err)
		}
	}
	var none *Map
	if got, err := none.Host("/x"); got != "/x" || err != nil {
		t.Errorf("nil Map: Host = %q, %v", got, err)
	}
}

func TestDetectUnknownContainer(t *testing.T) {
	m, err := Detect(context.Background(), func(context.Context, string) ([]Mount, bool, error) { return nil, false, nil })
	if m != nil || err != nil {
		t.Errorf("an engine that does not know the container: %v, %v; want no map", m, err)
	}
}
