package sockfd

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// FD returns the descriptor of a connection's socket, or -1 if it has none (always -1
// off Linux). The number stays the socket's while the connection is open.
func FD(c net.Conn) int {
	fd := -1
	if withSocket(c, func(s uintptr) { fd = int(s) }) != nil {
		return -1
	}
	return fd
}

// Dup duplicates the descriptor of a connection's socket with FD_CLOEXEC set,
// atomically, so that no child another goroutine starts meanwhile inherits it by
// accident. It fails if the connection is closed, and off Linux.
func Dup(c net.Conn) (int, error) {
	nfd := -1
	var errno syscall.Errno
	if err := withSocket(c, func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_DUPFD_CLOEXEC, 0)
		nfd, errno = int(r), e
	}); err != nil {
		return -1, err
	}
	if errno != 0 {
		return -1, errno
	}
	return nfd, nil
}

// Pending reports whether an idle connection has something to read: bytes the peer sent
// unasked, or an end of file (an idle connection of a request-response protocol, healthy,
// has nothing). It peeks without blocking and without consuming anything,
// and says true if it cannot tell (false without a socket, and always false off Linux).
// fd is the socket's descriptor if the caller knows it (see [FD]), or -1: a caller that
// owns the idle connection knows nothing can close it meanwhile, and asking the runtime
// for the descriptor again costs two allocations.
func Pending(c net.Conn, fd int) bool {
	if fd >= 0 {
		return peekPending(fd)
	}
	pending := true
	err := withSocket(c, func(fd uintptr) { pending = peekPending(int(fd)) })
	if errors.Is(err, errNoSocket) {
		return false
	}
	return err != nil || pending
}

func peekPending(fd int) bool {
	var b [1]byte
	_, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno != syscall.EAGAIN
}

// Peek copies into buf what the socket fd has received and nobody has read yet, without
// consuming it or blocking, and returns how many bytes it copied (0 if none, or on any
// error; always 0 off Linux).
func Peek(fd int, buf []byte) int {
	if len(buf) == 0 {
		return 0
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])),
		uintptr(len(buf)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	if errno != 0 {
		return 0
	}
	return int(n)
}

// Shutdown shuts a socket down both ways, through any descriptor of it: the peer sees the
// connection end at once, and every read or write of it fails from then on, whoever does
// it. It does nothing off Linux.
func Shutdown(fd int) { syscall.Shutdown(fd, syscall.SHUT_RDWR) }

// Close closes a descriptor, such as one from [Dup]. It does nothing off Linux.
func Close(fd int) { syscall.Close(fd) }

// Err returns the socket's pending error (SO_ERROR): ETIMEDOUT after a keepalive abort,
// ECONNRESET after a reset; nil after an orderly close by the peer, and always nil off
// Linux.
func Err(fd int) error {
	n, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err != nil || n == 0 {
		return err
	}
	return syscall.Errno(n)
}

// ListenerIsParent reports whether the process listening on the Unix socket c is
// connected to is the parent of process pid: SO_PEERCRED gives the listener's pid
// (recorded when it called listen), /proc the parent of pid. Pids are unique within a pid
// namespace; if the two ends are in different ones, the listener's pid reads as 0 or pid
// names another process here, and the answer is false. Any doubt (unreadable /proc, no
// credentials, not Linux) is false.
func ListenerIsParent(c net.Conn, pid uint32) bool {
	var listener int32
	if withSocket(c, func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			listener = cred.Pid
		}
	}) != nil || listener <= 0 || pid == 0 {
		return false
	}
	ppid, ok := parentOf(int(pid))
	return ok && ppid == int(listener)
}

// parentOf reads a process's parent pid from /proc/PID/stat: the fourth field, after the
// command name in parentheses (which may itself contain spaces and parentheses).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}
