//go:build unix

package egress

import (
	"io"
	"net"
	"syscall"
)

// peekTCP reads the first byte of c with MSG_PEEK, so that c stays a plain
// *net.TCPConn (which tunnels can splice) with nothing buffered aside. It honours
// c's read deadline.
func peekTCP(c *net.TCPConn) (byte, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, errNoPeek
	}
	var b [1]byte
	var n int
	var serr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, serr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
			if serr != syscall.EINTR {
				return serr != syscall.EAGAIN
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	if n == 0 {
		return 0, io.EOF
	}
	return b[0], nil
}
