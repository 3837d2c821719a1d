//go:build !unix

package sockfd

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"
)

// SetUserTimeout fails where there is no TCP_USER_TIMEOUT: the caller cannot bound how
// long unacknowledged data keeps a connection alive.
func SetUserTimeout(net.Conn, time.Duration) error {
	return fmt.Errorf("TCP_USER_TIMEOUT on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
