//go:build !unix

package egress

import "net"

func peekTCP(*net.TCPConn) (byte, error) { return 0, errNoPeek }
