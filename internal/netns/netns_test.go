package netns

import (
	"io"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenServesOnlyTheNamespace checks that a listener made with Listen
// is reached from inside its namespace and not from the host's.
func TestListenServesOnlyTheNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	host, _ := os.Readlink("/proc/self/ns/net")
	ns, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	l, err := Listen(ns, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("inside"))
			c.Close()
		}
	}()
	addr := l.Addr().String()
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("the host's namespace reached %s, a listener of the sandbox's", addr)
	}
	got, err := onThread(func() (string, error) {
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return "", err
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "", err
		}
		defer c.Close()
		b, err := io.ReadAll(c)
		return string(b), err
	}, true)
	if err != nil || got != "inside" {
		t.Fatalf("from inside the namespace: %q, %v; want \"inside\"", got, err)
	}
	// Threads that ran the namespace code went back or ended.
	for i := 0; i < 50; i++ {
		if self, _ := onThread(func() (string, error) { return os.Readlink("/proc/thread-self/ns/net") }, false); self != host {
			t.Fatalf("a thread of this process is in %s, not the host's %s", self, host)
		}
	}
}
