//go:build !linux

package sockfd

import (
	"errors"
	"net"
)

// Off Linux the descriptor tricks are not used: callers keep to portable means (a reader
// goroutine instead of a peek, the ownership checks instead of SO_PEERCRED). See the
// Linux versions for what each does there.

// FD returns -1: off Linux the caller has no use for the descriptor.
func FD(net.Conn) int { return -1 }

// Dup fails off Linux.
func Dup(net.Conn) (int, error) {
	return -1, errors.New("not supported on this platform")
}

// Pending reports false off Linux: the caller cannot tell, and proceeds.
func Pending(net.Conn, int) bool { return false }

// Peek copies nothing off Linux.
func Peek(int, []byte) int { return 0 }

// Shutdown does nothing off Linux.
func Shutdown(int) {}

// Close does nothing off Linux.
func Close(int) {}

// Err returns nil off Linux.
func Err(int) error { return nil }

// ListenerIsParent is Linux-only (SO_PEERCRED and /proc): elsewhere it reports false.
func ListenerIsParent(net.Conn, uint32) bool { return false }
