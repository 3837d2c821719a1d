package sockfd

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// parentOf reads the parent pid after the command name, which may hold spaces and
// parentheses: checked on this process and on a child whose name is "a) b (c".
func TestParentOfReadsProcStat(t *testing.T) {
	ppid, ok := parentOf(os.Getpid())
	require.True(t, ok)
	require.Equal(t, os.Getppid(), ppid)
	dir := t.TempDir()
	odd := filepath.Join(dir, "a) b (c")
	require.NoError(t, os.Symlink("/bin/sleep", odd))
	cmd := exec.Command(odd, "5")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	require.Eventually(t, func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
		return err == nil && strings.Contains(string(b), "(a) b (c)")
	}, 5*time.Second, time.Millisecond, "the child's /proc stat does not show its odd name")
	ppid, ok = parentOf(cmd.Process.Pid)
	require.True(t, ok)
	require.Equal(t, os.Getpid(), ppid)
	_, ok = parentOf(1 << 30) // no such process
	require.False(t, ok)
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err = ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// Pending sees unasked bytes and an end of file without consuming anything, by a known
// descriptor or through the runtime, and nothing on an idle connection.
func TestPendingPeeksWithoutConsuming(t *testing.T) {
	client, server := tcpPair(t)
	fd := FD(client)
	require.GreaterOrEqual(t, fd, 0)
	require.False(t, Pending(client, fd), "idle")
	require.False(t, Pending(client, -1), "idle, through the runtime")
	_, err := server.Write([]byte("x"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return Pending(client, fd) }, 5*time.Second, time.Millisecond)
	require.True(t, Pending(client, -1))
	b := make([]byte, 2)
	n, err := client.Read(b)
	require.NoError(t, err)
	require.Equal(t, "x", string(b[:n]), "the peek consumed nothing")
	require.False(t, Pending(client, fd), "read")
	require.NoError(t, server.Close())
	require.Eventually(t, func() bool { return Pending(client, fd) }, 5*time.Second, time.Millisecond, "EOF")
	client.Close()
	require.True(t, Pending(client, -1), "closed: cannot tell")
}

// A duplicate keeps the socket open after the connection's own descriptor is closed,
// carries FD_CLOEXEC, and Shutdown through it ends the connection for the peer. Err
// reports nothing after an orderly shutdown.
func TestDupShutdownErr(t *testing.T) {
	client, server := tcpPair(t)
	dup, err := Dup(client)
	require.NoError(t, err)
	require.NotEqual(t, FD(client), dup)
	f := os.NewFile(uintptr(dup), "dup")
	defer f.Close()
	flags, err := fcntlGetFD(dup)
	require.NoError(t, err)
	require.NotZero(t, flags&1, "FD_CLOEXEC")
	require.NoError(t, client.Close())
	_, err = Dup(client)
	require.Error(t, err, "a closed connection has no descriptor to duplicate")
	_, err = server.Write([]byte("still open"))
	require.NoError(t, err)
	require.NoError(t, Err(dup))
	Shutdown(dup)
	server.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = server.Read(make([]byte, 1))
	require.Error(t, err, "the peer sees the end at once")
	require.False(t, TimedOut(err))
}

// SetUserTimeout sets the option the kernel reads back.
func TestSetUserTimeout(t *testing.T) {
	client, _ := tcpPair(t)
	require.NoError(t, SetUserTimeout(client, 11500*time.Millisecond))
	var got int
	var gerr error
	require.NoError(t, withSocket(client, func(fd uintptr) { got, gerr = getsockoptUserTimeout(int(fd)) }))
	require.NoError(t, gerr)
	require.Equal(t, 11500, got)
}

func fcntlGetFD(fd int) (int, error) {
	r, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if e != 0 {
		return 0, e
	}
	return int(r), nil
}

func getsockoptUserTimeout(fd int) (int, error) {
	return syscall.GetsockoptInt(fd, syscall.IPPROTO_TCP, tcpUserTimeout)
}
