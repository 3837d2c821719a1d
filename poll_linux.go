package advisory

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"
)

// poller watches the sockets of idle held sessions with one epoll instance and one
// goroutine per Manager. Holding a lock costs one epoll_ctl to add its socket and one to
// remove it at Unlock: no goroutine is started or woken on the lock/unlock path. When a
// watched socket becomes readable or hangs up (a FATAL message from pg_terminate_backend
// or a shutdown, a FIN, an RST, a keepalive abort), the session is handed to its blocking
// reader (session.readUntilLoss), which reads and classifies what happened.
type poller struct {
	epfd int
	wake [2]int // a pipe: writing to wake[1] stops run

	mu   sync.Mutex
	byID map[uint64]*pin
	next uint64 // the last ID given out
	done chan struct{}
}

// wakeID is the epoll data of the wake pipe; registration IDs start at 1.
//
// Every registration gets a new 64-bit ID, carried in the event's data, and IDs are never
// reused in a Manager's life (2^64 holds would take millennia): an event still queued for
// a registration that has since been removed finds no session, and can never be taken
// for a later lock's, whose socket may have the same descriptor number.
const wakeID = 0

// eventID and eventData convert between an ID and the 64 bits of epoll data, which
// package syscall splits into Fd and Pad.
func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

func eventData(id uint64, events uint32) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &poller{epfd: epfd, byID: make(map[uint64]*pin), done: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := eventData(wakeID, syscall.EPOLLIN)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.closeFDs()
		return nil, err
	}
	go p.run()
	return p, nil
}

func (p *poller) run() {
	defer close(p.done)
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(p.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			p.failAll()
			return
		}
		for i := range events[:n] {
			id := eventID(&events[i])
			if id == wakeID {
				return
			}
			p.mu.Lock()
			s := p.byID[id]
			delete(p.byID, id)
			p.mu.Unlock()
			if s != nil {
				s.socketEvent()
			}
		}
	}
}

// failAll hands every watched session to its blocking reader; used only if epoll_wait
// itself fails, so that no held lock goes unwatched.
func (p *poller) failAll() {
	p.mu.Lock()
	watched := p.byID
	p.byID = nil
	p.mu.Unlock()
	for _, s := range watched {
		s.socketEvent()
	}
}

// add starts watching s's socket. The registration is one-shot: the first event removes
// it from the poller's table. The caller holds s.mu.
//
// Descriptor numbers are reused as soon as a socket is closed, so epoll_ctl must only
// ever be called on s.fd while that number is certainly s's socket. The rule that ensures
// it: a session is registered only while it is in watchPolled mode, and in that mode
// nobody reads from or closes its connection (the poller does no I/O on it). Both ways out
// of watchPolled, socketEvent and stopWatch, remove the registration under s.mu before
// anyone else may touch the connection. The reader goroutine, which may see the
// connection fail and close it, starts only after that.
func (p *poller) add(s *pin) error {
	return p.register(s, s.fd, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT)
}

// addHangup starts watching s's connection while a caller's transaction uses it (see
// pin.beginTx): only for a hang-up or an error (EPOLLRDHUP, EPOLLHUP, EPOLLERR), never for
// input, which is the transaction's. It watches fd, the session's own duplicate of the
// socket's descriptor: the caller's statements may make pgx close the connection's
// descriptor at any time, but the duplicate's number stays the session's until it closes
// it, after remove. The caller holds s.mu.
func (p *poller) addHangup(s *pin, fd int) error {
	return p.register(s, fd, syscall.EPOLLRDHUP|syscall.EPOLLONESHOT)
}

func (p *poller) register(s *pin, fd int, events uint32) error {
	if fd < 0 {
		return errors.New("no socket descriptor")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		return errors.New("poller stopped")
	}
	p.next++
	id := p.next
	ev := eventData(id, events)
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return err
	}
	s.pollID, s.pollFD = id, fd
	p.byID[id] = s
	return nil
}

// remove stops watching s's socket (also a one-shot registration that already fired,
// which stays in the epoll set until deleted). The caller holds s.mu, and s is still in
// watchPolled mode (see add), or the descriptor is the session's own duplicate (see
// addHangup).
func (p *poller) remove(s *pin) {
	if s.pollID == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID != nil {
		delete(p.byID, s.pollID)
	}
	s.pollID = 0
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, s.pollFD, nil)
}

// stop ends the poller's goroutine and closes its descriptors. Call it once, after every
// session has ended.
func (p *poller) stop() {
	syscall.Write(p.wake[1], []byte{0})
	<-p.done
	p.closeFDs()
}

func (p *poller) closeFDs() {
	syscall.Close(p.epfd)
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
}

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

// socketFD returns the descriptor of a connection's socket, or -1 if it has none. The
// number stays valid while the connection is open; the session closes the connection only
// after removing it from the poller.
func socketFD(c net.Conn) int {
	fd := -1
	if withSocket(c, func(s uintptr) { fd = int(s) }) != nil {
		return -1
	}
	return fd
}

// dupSocket duplicates the descriptor of a connection's socket with FD_CLOEXEC set,
// atomically, so that no child another goroutine starts meanwhile inherits it by
// accident. It fails if the connection is closed.
func dupSocket(c net.Conn) (int, error) {
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

// pendingInput reports whether an idle connection has something to read: bytes the
// server sent unasked (a FATAL from pg_terminate_backend, a shutdown notice) or an end
// of file. A healthy idle connection has nothing. It peeks without blocking and without
// consuming anything, and says true if it cannot tell (false without a socket). fd is
// the socket's descriptor found at setup (see connFD), or -1: the caller owns the idle
// connection, so nothing can close it meanwhile, and asking the runtime for the
// descriptor again would cost two allocations per Lock.
func pendingInput(c net.Conn, fd int) bool {
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

// shutdownSocket shuts a socket down both ways, through any descriptor of it: the server
// sees the connection end at once (and ends the session, freeing its locks), and every
// read or write of it fails from then on, whoever does it.
func shutdownSocket(fd int) { syscall.Shutdown(fd, syscall.SHUT_RDWR) }

func closeFD(fd int) { syscall.Close(fd) }

// socketError returns the socket's pending error (SO_ERROR): ETIMEDOUT after a keepalive
// abort, ECONNRESET after a reset; nil after an orderly close by the peer.
func socketError(fd int) error {
	n, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
	if err != nil || n == 0 {
		return err
	}
	return syscall.Errno(n)
}

// unixDirect reports whether the Unix socket c is connected straight to the PostgreSQL
// backend backendPID: the process listening on the socket we connected to (SO_PEERCRED
// gives the listener's pid, recorded when it called listen) is the backend's parent, as
// /proc shows it. A postmaster forks every backend; a pooler listening on the socket
// is not the parent of the backends behind it. Pids are unique within a pid namespace;
// if client and server are in different ones, the listener's pid reads as 0 or the
// backend's pid names another process here, and the answer is false. Any doubt
// (unreadable /proc, no credentials) is false: the connection keeps its checks.
func unixDirect(c net.Conn, backendPID uint32) bool {
	var listener int32
	if withSocket(c, func(fd uintptr) {
		if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
			listener = cred.Pid
		}
	}) != nil || listener <= 0 || backendPID == 0 {
		return false
	}
	ppid, ok := parentOf(int(backendPID))
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
