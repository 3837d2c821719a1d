package advisory

import (
	"errors"
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
