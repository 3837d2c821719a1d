package advisory

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// A Lock is one held advisory lock, until Unlock, loss, or the Manager's Close. It stands
// on one of three things: a session (or, see [WithHolding], a transaction) of its own, on
// one connection it pins (the default); a session its Manager shares among holdings, for a
// lock that was free ([WithSharedSessions]; see [Lock.SharesSession]: it then shares
// their fate and has no session to lend to BeginFunc, Token, File, Publish or Drain); or
// the holding of another Lock that its call's ctx carried (re-entered, below). Its
// methods are safe for concurrent use by
// multiple goroutines.
//
// A re-entered Lock ([Lock.Reentered]; see [Manager.Lock]) is a handle of its own on a
// holding its call's ctx carried: it pins nothing, and what it reads or runs (Key, PID,
// Token, BeginFunc, the work tag, Drain) is the holding's. Done, Err and Unlock are its
// own: it ends at its Unlock, which releases nothing on the server, or when the holding
// ends (released, lost, or its Manager closed), whichever comes first.
type Lock struct {
	s         *pin    // the pin whose connection its footing is on (see footing)
	on        footing // what it stands on: s itself, a slot on a shared session, a re-entry
	name      string
	announced atomic.Bool // published (Publish): Unlock announces the release
}

// Key returns the lock's key.
func (l *Lock) Key() Key { return l.on.holds().key }

// Name returns the name the lock was taken with, or "" for a raw key.
func (l *Lock) Name() string { return l.name }

// Shared reports whether the lock is held in shared mode.
func (l *Lock) Shared() bool { return l.on.holds().shared }

// PID returns the process ID of the PostgreSQL backend that holds the lock: the pid
// column of its pg_locks row.
func (l *Lock) PID() uint32 { return l.s.pid }

// Done returns a channel that is closed when the lock ends: after Unlock, on loss, or when
// the Manager is closed. Read [Lock.Err] to tell which. It does not block. A loss during
// [Lock.BeginFunc] closes it at once; the connection then goes back when BeginFunc returns.
// A re-entered Lock's closes at its own Unlock, or before the holding it re-entered is
// released or when it is lost.
func (l *Lock) Done() <-chan struct{} { return l.on.doneChan() }

// Err returns nil while the lock is held. After Done is closed it returns an error
// wrapping [ErrLockLost] if the lock was lost (connection terminated, server restarted,
// network failed, Manager closed), or [ErrNotHeld] after Unlock. A re-entered Lock whose
// holding was released while it was open reports an error wrapping ErrNotHeld; one whose
// holding was lost, the holding's loss.
func (l *Lock) Err() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.on.endOf()
}

// Unlock releases the lock and returns its connection to the pool. It blocks for one
// round trip; ctx governs that round trip, and waiting for a [Lock.BeginFunc] in progress
// on the lock (if ctx ends first, the lock stays held and the error wraps ctx.Err()).
// With a heartbeat (behind a proxy, by default) the round trip is also bounded by
// Bounds.HeartbeatTold: a release a frozen server has not answered by then fails with
// the loss error below, whatever ctx (see [WithHeartbeat]). A
// slot of [Semaphore.Acquire] may first wait, bounded by ctx, for the end of the wait
// that Acquire cancelled on finding it.
//
// It returns nil when the server confirmed the release, or when the lock passed to a
// Lock call of this Manager queued for it ([WithLocalHandoff]: no round trip; the
// connection had reported no loss). If the lock had been lost, it
// returns the loss error (wrapping [ErrLockLost]): the caller's critical section may have
// overlapped another holder's. A second Unlock returns [ErrNotHeld]. On any other error
// (ctx ended, connection failed) the connection is closed, so the server frees the lock
// as the session ends. In every case the lock is no longer held by this Lock afterwards.
// Unlock ends the Locks that re-entered this one's holding and are still open first.
//
// On a re-entered Lock, Unlock ends that handle only, at once, with no statement: it
// returns nil, or the end it already had (ErrNotHeld, or the holding's loss).
func (l *Lock) Unlock(ctx context.Context) error { return l.on.unlockFor(ctx, l) }

// File returns a duplicate of the lock connection's socket descriptor, for a child
// process to inherit (os/exec.Cmd.ExtraFiles), as flock(1) hands its lock descriptor to
// its command: the server keeps a session, and so its lock, until every process holding
// the socket has exited or the lock is released. A supervisor that is killed while its
// child runs then cannot lose the lock to another holder before the child is gone too
// (pair it with a parent-death signal, so that the child does not outlive it).
//
// Once File has been called, the lock's connection is closed when the lock ends, never
// returned to the pool. The descriptor is close-on-exec until passed through
// ExtraFiles; the caller must close the file once the child has started. The child must
// never read from or write to it. It
// does not block. It returns an error wrapping [ErrNotHeld] or [ErrLockLost] if the lock
// has ended, and an error on a platform or connection without a socket descriptor
// (Linux with TCP or a Unix socket always has one).
func (l *Lock) File() (*os.File, error) {
	s, err := l.own("hand on the socket of", false)
	if err != nil {
		return nil, err
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	// The runtime pins the descriptor while sockfd.Dup works on it, so a concurrent close
	// (a watcher finding the connection dead) cannot hand us a reused number.
	fd, err := sockfd.Dup(s.pg.Conn())
	if err != nil {
		return nil, fmt.Errorf("advisory: duplicate the lock's socket: %w", err)
	}
	// The socket has left the library's hands: a connection the pool handed out again
	// would carry a later, unrelated lock on a session that a child process keeps alive.
	s.retire.Store(true)
	if err := l.Err(); err != nil { // ended meanwhile: the copy would hold nothing
		sockfd.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "advisory-lock-"+l.Key().String()), nil
}
