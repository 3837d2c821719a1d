package advisory

import (
	"errors"
	"net"
	"sync"
	"syscall"
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
	byID map[int32]*session
	next int32
	done chan struct{}
}

// wakeID is the epoll data of the wake pipe; session IDs start at 1.
const wakeID = 0

func newPoller() (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	p := &poller{epfd: epfd, byID: make(map[int32]*session), done: make(chan struct{})}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: wakeID}
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
		for _, ev := range events[:n] {
			if ev.Fd == wakeID {
				return
			}
			p.mu.Lock()
			s := p.byID[ev.Fd]
			delete(p.byID, ev.Fd)
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
// it from the poller's table.
func (p *poller) add(s *session) error {
	if s.fd < 0 {
		return errors.New("no socket descriptor")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		return errors.New("poller stopped")
	}
	p.next++
	if p.next <= wakeID {
		p.next = wakeID + 1
	}
	s.pollID = p.next
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: s.pollID}
	if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
		return err
	}
	p.byID[s.pollID] = s
	return nil
}

// remove stops watching s's socket. It is a no-op if the socket's event already fired.
func (p *poller) remove(s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID != nil {
		delete(p.byID, s.pollID)
	}
	syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, s.fd, nil)
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

// socketFD returns the descriptor of a connection's socket (under TLS, of the TCP
// connection beneath), or -1 if it has none. The number stays valid while the connection
// is open; the session closes the connection only after removing it from the poller.
func socketFD(c net.Conn) int {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = nc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if raw.Control(func(s uintptr) { fd = int(s) }) != nil {
		return -1
	}
	return fd
}
