package backendtest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/sandbash/sandbash"
)

// RunOutput runs the part of the suite that proves the output path (exit
// statuses, one stream in write order, live output, bounded memory,
// unforgeable completion, Close, no way to the output channel) on a
// backend reached another way than Run's: a container engine over TCP, say,
// whose output comes through the attach stream instead of a channel.
func RunOutput(t *testing.T, factory Factory, caps Capabilities) {
	tests := []struct {
		name string
		fn   func(*fixture)
	}{
		{"ExitCodes", testExitCodes},
		{"OutputOrder", testOutputOrder},
		{"Cancellation", testCancel},
		{"LargeOutputBounded", testLargeOutput},
		{"Close", testClose},
		{"CompletionCannotBeForged", testForgery},
		{"OutputChannelUnreachable", testChannelUnreachable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(newFixture(t, factory, caps))
		})
	}
}

// testChannelUnreachable: where a container's supervisor writes the call's
// output to a FIFO sandbash offered (at /run/sandbash-out), the command
// finds no name to open it by, nor another container's (a call running
// alongside in the same session): its only way to the channel is its own
// stdout and stderr.
func testChannelUnreachable(f *fixture) {
	s := f.open(sandbash.Config{})
	stop := f.startLong(s, "echo started; sleep 300")
	defer stop()
	probe := `ls -A /run/sandbash-out 2>/dev/null; find / -type p ! -path '/proc/*' 2>/dev/null; ` +
		`for p in /run/sandbash-out/* /run/sandbash-out/.*; do [ -p "$p" ] && { : > "$p"; } 2>/dev/null && echo "opened $p"; done; echo done`
	r := f.run(s, probe)
	if r.ExitCode != 0 || r.Output != "done\n" {
		f.t.Errorf("the command found a way to an output channel (exit %d):\n%s", r.ExitCode, r.Output)
	}
}

// TCPProxy serves a loopback TCP address that forwards each connection to
// the Unix socket at path (an engine's API socket), until the test ends,
// and returns it as tcp://ADDR: an engine reached as if remote.
func TCPProxy(t *testing.T, path string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", path)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				if cw, ok := dst.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
			}
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	return "tcp://" + strings.TrimPrefix(l.Addr().String(), "tcp://")
}
