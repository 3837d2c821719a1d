//go:build unix

package sockfd

import (
	"net"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h (not in package syscall).
const tcpUserTimeout = 0x12

// SetUserTimeout sets TCP_USER_TIMEOUT on a TCP connection's socket, in whole
// milliseconds: the kernel aborts the connection when sent data stays unacknowledged for
// d, and, with keepalive on, the probe count is ignored and the connection is dropped at
// the first probe tick at or after d.
func SetUserTimeout(c net.Conn, d time.Duration) error {
	var serr error
	err := withSocket(c, func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, int(d/time.Millisecond))
	})
	if err == nil {
		err = serr
	}
	return err
}
