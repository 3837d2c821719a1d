// Package sockwatch tells its caller when an idle socket becomes readable or hangs up,
// without a goroutine per socket: on Linux one epoll instance and one goroutine per
// [Watcher] watch every registered descriptor. Registering and removing a socket are one
// epoll_ctl each; nothing is started or woken for them.
//
// It exists so that a caller holding many long-lived idle connections (whose only news is
// that the peer sent something unasked or went away) need not park a reader goroutine on
// each. It knows nothing of what the connections carry: the caller registers a
// descriptor with a [Handler] and is called back once, after which the caller reads the
// socket itself.
//
// Elsewhere than on Linux there is no Watcher ([New] returns nil): the caller watches
// each connection with a blocking read of its own.
package sockwatch

// A Handler is told of the event its registration was waiting for. SocketEvent is called
// at most once per registration, from the Watcher's goroutine, which waits for it to
// return before it handles the next event: it must not block for long, and it may call
// [Watcher.Remove] (of its own registration, which the event has already taken out of
// the Watcher's table, or any other).
type Handler interface {
	SocketEvent()
}

// A Registration is one watch of one descriptor, as [Watcher.Add] or [Watcher.AddHangup]
// made it. The zero Registration is not registered. It is a plain value, owned by the
// caller, who passes it back to [Watcher.Remove].
type Registration struct {
	id uint64 // 0 while not registered
	fd int
}
