package sockwatch

import (
	"errors"
	"sync"
	"syscall"
)

// Watcher watches registered sockets with one epoll instance and one goroutine. A Watcher
// is safe for concurrent use by multiple goroutines; Stop must be called once, after
// every registration has been removed or has fired.
type Watcher struct {
	epfd int
	wake [2]int // a pipe: writing to wake[1] stops run

	mu   sync.Mutex
	byID map[uint64]Handler
	next uint64 // the last ID given out
	done chan struct{}
}

// wakeID is the epoll data of the wake pipe; registration IDs start at 1.
//
// Every registration gets a new 64-bit ID, carried in the event's data, and IDs are never
// reused in a Watcher's life (2^64 registrations would take millennia): an event still
// queued for a registration that has since been removed finds no handler, and can never
// be taken for a later registration's, whose socket may have the same descriptor number.
const wakeID = 0

// eventID and eventData convert between an ID and the 64 bits of epoll data, which
// package syscall splits into Fd and Pad.
func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

func eventData(id uint64, events uint32) syscall.EpollEvent {
	return syscall.EpollEvent{Events: events, Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
}

// New starts a Watcher and its goroutine. It returns nil and no error where there is no
// epoll (see the package doc).
func New() (*Watcher, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &Watcher{epfd: epfd, byID: make(map[uint64]Handler), done: make(chan struct{})}
	if err := syscall.Pipe2(w.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, err
	}
	ev := eventData(wakeID, syscall.EPOLLIN)
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, w.wake[0], &ev); err != nil {
		w.closeFDs()
		return nil, err
	}
	go w.run()
	return w, nil
}

func (w *Watcher) run() {
	defer close(w.done)
	events := make([]syscall.EpollEvent, 64)
	for {
		n, err := syscall.EpollWait(w.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			w.failAll()
			return
		}
		for i := range events[:n] {
			id := eventID(&events[i])
			if id == wakeID {
				return
			}
			w.mu.Lock()
			h := w.byID[id]
			delete(w.byID, id)
			w.mu.Unlock()
			if h != nil {
				h.SocketEvent()
			}
		}
	}
}

// failAll calls every registration's handler; used only if epoll_wait itself fails, so
// that no watched socket goes unwatched: each caller then reads its own.
func (w *Watcher) failAll() {
	w.mu.Lock()
	watched := w.byID
	w.byID = nil
	w.mu.Unlock()
	for _, h := range watched {
		h.SocketEvent()
	}
}

// Add starts watching fd for input or a hang-up (EPOLLIN, EPOLLRDHUP), and calls
// h.SocketEvent at the first. The registration is one-shot: the event removes it from
// the Watcher's table, but the caller must still Remove it (it stays in the epoll set
// until then). Add does no I/O on the socket.
//
// Descriptor numbers are reused as soon as a socket is closed, so fd must certainly be
// the caller's socket from Add until Remove returns: nobody may close it meanwhile. The
// caller must also not read from the socket meanwhile, or the Watcher may miss what it
// read.
func (w *Watcher) Add(fd int, h Handler) (Registration, error) {
	return w.register(fd, h, syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLONESHOT)
}

// AddHangup is Add for a hang-up or an error only (EPOLLRDHUP, EPOLLHUP, EPOLLERR), never
// for input: the caller may read and write the socket meanwhile. fd must still stay open
// until Remove returns; a caller that does not control when the connection's own
// descriptor is closed registers a duplicate of it, which it closes after Remove.
func (w *Watcher) AddHangup(fd int, h Handler) (Registration, error) {
	return w.register(fd, h, syscall.EPOLLRDHUP|syscall.EPOLLONESHOT)
}

func (w *Watcher) register(fd int, h Handler, events uint32) (Registration, error) {
	if fd < 0 {
		return Registration{}, errors.New("no socket descriptor")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID == nil {
		return Registration{}, errors.New("socket watcher stopped")
	}
	w.next++
	id := w.next
	ev := eventData(id, events)
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return Registration{}, err
	}
	w.byID[id] = h
	return Registration{id: id, fd: fd}, nil
}

// Registered returns how many registrations (Add, AddHangup) the Watcher has made in its
// life: each cost an epoll_ctl ADD.
func (w *Watcher) Registered() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// Remove stops watching (also a one-shot registration that already fired, which stays in
// the epoll set until removed) and sets *r to the zero Registration. It does nothing for
// the zero Registration, on a nil Watcher too. The descriptor must still be the one
// registered (see Add).
func (w *Watcher) Remove(r *Registration) {
	if r.id == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byID != nil {
		delete(w.byID, r.id)
	}
	fd := r.fd
	*r = Registration{}
	syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
}

// Move makes a registration that has not fired call h instead of its handler, at no
// cost to the epoll set: a socket that passes from one owner to another stays
// registered. It reports false, and changes nothing, if the registration has fired (its
// handler has been or is being called; the caller must still Remove it) or is not
// registered.
func (w *Watcher) Move(r Registration, h Handler) bool {
	if r.id == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.byID[r.id]; !ok {
		return false
	}
	w.byID[r.id] = h
	return true
}

// Stop ends the Watcher's goroutine and closes its descriptors. Call it once, after every
// registration has been removed.
func (w *Watcher) Stop() {
	syscall.Write(w.wake[1], []byte{0})
	<-w.done
	w.closeFDs()
}

func (w *Watcher) closeFDs() {
	syscall.Close(w.epfd)
	syscall.Close(w.wake[0])
	syscall.Close(w.wake[1])
}
