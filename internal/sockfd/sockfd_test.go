package sockfd

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TimedOut and Reset see the kernel's errors through wrapping.
func TestErrnoClasses(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("read: %w", err) }
	require.True(t, TimedOut(wrap(syscall.ETIMEDOUT)))
	require.False(t, TimedOut(wrap(syscall.ECONNRESET)))
	require.True(t, Reset(wrap(syscall.ECONNRESET)))
	require.True(t, Reset(wrap(syscall.EPIPE)))
	require.False(t, Reset(wrap(syscall.ETIMEDOUT)))
	require.False(t, TimedOut(nil) || Reset(nil))
}
