package egress

import (
	"errors"
	"io"
	"net"
	"os"
	"time"
)

// tunnelChunk is how much one direction of a tunnel copies between two checks
// for activity. io.Copy of an io.LimitedReader between two *net.TCPConn is
// still spliced by the kernel.
const tunnelChunk = 4 << 20

// tunnel copies bytes both ways between the client and up, pre (already read
// from the client) first, until both directions end; then it closes both. It
// returns the bytes sent up (client to destination) and down. Idleness is
// watched by the client connection's watchdog, which closes the client and so
// ends the tunnel.
func (c *Call) tunnel(cc *clientConn, pre []byte, up net.Conn) (upN, downN int64) {
	defer func() {
		_ = cc.Close()
		_ = up.Close()
	}()
	_ = cc.SetDeadline(time.Time{})
	var client net.Conn = cc
	if cc.tcp != nil && len(cc.pre) == 0 {
		client = cc.tcp // splice-able
	}
	if len(pre) > 0 {
		n, err := up.Write(pre)
		upN += int64(n)
		if err != nil {
			return upN, 0
		}
		cc.wd.touch()
	}
	tick := max(c.p.pol.IdleTimeout/4, time.Millisecond)
	done := make(chan int64, 1)
	if !c.goFunc(func() {
		n, err := copyDir(up, client, cc.wd, tick)
		if err != nil {
			// Broken, not ended: stop the other direction too.
			_ = cc.Close()
			_ = up.Close()
		} else {
			closeWrite(up)
		}
		done <- n
	}) {
		return upN, 0
	}
	n, err := copyDir(client, up, cc.wd, tick)
	downN = n
	if err != nil {
		_ = cc.Close()
		_ = up.Close()
	} else {
		closeWrite(client)
	}
	upN += <-done
	return upN, downN
}

// copyDir copies src to dst until src ends (nil error) or either fails. Its
// reads wake every tick so that a slow but live stream counts as activity.
func copyDir(dst, src net.Conn, wd *watchdog, tick time.Duration) (int64, error) {
	var total int64
	for {
		_ = src.SetReadDeadline(time.Now().Add(tick))
		n, err := io.Copy(dst, io.LimitReader(src, tunnelChunk))
		total += n
		if n > 0 {
			wd.touch()
		}
		switch {
		case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
			continue // only reads have deadlines: no data lost, go on
		case err != nil:
			return total, err
		case n < tunnelChunk:
			return total, nil // src ended
		}
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
