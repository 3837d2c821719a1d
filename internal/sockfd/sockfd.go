// Package sockfd does what the net package does not offer on a connection's socket
// descriptor: find it, duplicate it, peek at it, shut it down, read its pending error,
// set TCP_USER_TIMEOUT, and ask who listens at the other end of a Unix socket.
//
// It exists so that the descriptor tricks and their syscalls stay out of the packages
// that use them: each function is one small, self-contained operation on a socket, and
// knows nothing of what the connection carries. They work on Linux; elsewhere they report
// that they cannot (see each function), and callers fall back to portable means.
//
// A descriptor number is reused as soon as its socket is closed: a caller that keeps a
// number (from [FD] or [Dup]) must know that the socket is still open when it uses it.
package sockfd

import (
	"errors"
	"net"
	"syscall"
)

// errNoSocket is withSocket's error for a connection without a socket descriptor.
var errNoSocket = errors.New("the connection has no socket descriptor")

// withSocket calls f with the descriptor of a connection's socket (under TLS, of the TCP
// connection beneath), which the runtime keeps from being closed while f runs. It fails
// with errNoSocket if the connection has none, and with the runtime's error if it is
// closed.
func withSocket(c net.Conn, f func(fd uintptr)) error {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errNoSocket
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	return raw.Control(f)
}

// TimedOut reports whether err is ETIMEDOUT: the kernel aborted the connection because the
// peer went silent past the keepalive or TCP user timeout limit (see [Err]).
func TimedOut(err error) bool { return errors.Is(err, syscall.ETIMEDOUT) }

// Reset reports whether err is ECONNRESET or EPIPE: the peer reset the connection.
func Reset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
