package main_test

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// openPTY returns a new pseudo-terminal: its master, where the test types, and its slave,
// a real terminal for the program's standard input. Both are closed when t ends. What
// the terminal shows (the echo) is read and dropped.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, slave = newPTY(t)
	go io.Copy(io.Discard, master)
	return master, slave
}

// newPTY is openPTY without the reader of the master's output.
func newPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	require.NoError(t, ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)))
	var n uint32
	require.NoError(t, ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)))
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}
