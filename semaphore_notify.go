package advisory

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A slot freed in another process is announced with NOTIFY on the semaphore's channel,
// "advisory_semaphore_" and the turnstile key in hex, once the slot's Lock has ended; the
// waiting Acquire (the turnstile's holder) LISTENs on it with a connection of its own and
// tries the slots again when a notification comes. A holder that crashes sends none: then
// the slot waited for on the server, or the next re-check, finds it.

// notifyTimeout bounds the NOTIFY sent after a slot is freed: it is sent after Unlock
// returned, and only hastens a waiter, which the re-check finds the slot for anyway.
const notifyTimeout = time.Second

func (sem *Semaphore) channel() string {
	return "advisory_semaphore_" + strconv.FormatUint(uint64(sem.turnstile.key), 16)
}

// announce tells waiting Acquire calls of other processes that a slot was freed.
func (sem *Semaphore) announce() { sem.m.notify(sem.channel(), "") }

// notify sends NOTIFY channel with payload from a pool connection, best effort: bounded
// by notifyTimeout, and nothing once Close has begun. A notification only hastens a
// listener, which re-checks on its own anyway.
func (m *Manager) notify(channel, payload string) {
	if err := m.enter(); err != nil {
		return
	}
	m.sendNotify(channel, payload)
}

// sendNotify is notify for a caller that has entered the Manager (m.enter); it leaves it.
func (m *Manager) sendNotify(channel, payload string) {
	defer m.active.Done()
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	defer cancel()
	m.pool.Exec(ctx, "SELECT pg_catalog.pg_notify($1, $2)", channel, payload)
}

// A listener is the waiting Acquire's connection that LISTENs on the semaphore's channel
// (none behind a transaction pooler: see Semaphore.listen). It is a plain pool connection that never holds a lock: it goes back to the pool after
// UNLISTEN, or is closed if that fails.
type listener struct {
	pc   *pgxpool.Conn
	beat time.Duration // the Manager's heartbeat: see notification
}

// listen returns a listener on s's channel. It blocks for a pool connection and one round
// trip; ctx governs both.
func (sem *Semaphore) listen(ctx context.Context) (*listener, error) {
	if sem.m.proxy.txPooled.Load() {
		// Behind a transaction pooler no connection can LISTEN (see leaderHub): the waiter
		// tries the slots again every SemaphoreRecheck, and when a slot Lock of its own
		// process ends.
		return &listener{}, nil
	}
	pc, err := sem.m.pool.Acquire(ctx)
	if err != nil {
		return nil, sem.m.acquireError(ctx, err)
	}
	if _, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{sem.channel()}.Sanitize()); err != nil {
		ln := &listener{pc: pc}
		ln.close(false)
		return nil, err
	}
	return &listener{pc, sem.m.set.heartbeat}, nil
}

// wait blocks until a notification comes (it returns true) or ctx ends (false).
// Notifications that came while nobody waited are returned first.
func (ln *listener) wait(ctx context.Context) bool {
	_, err := ln.notification(ctx)
	return err == nil && ctx.Err() == nil
}

// notification waits for the next notification until ctx ends. With a heartbeat (see
// WithHeartbeat and pin_slices.go: every connection the Manager keeps open speaks at
// least once a beat) it waits a beat at a time and sends SELECT 1 between, so that an idle
// reaper in the path does not cut the listening connection.
func (ln *listener) notification(ctx context.Context) (*pgconn.Notification, error) {
	if ln.beat <= 0 {
		return ln.pc.Conn().WaitForNotification(ctx)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, ln.beat)
		n, err := ln.pc.Conn().WaitForNotification(wctx)
		cancel()
		if err == nil || ctx.Err() != nil || wctx.Err() == nil {
			return n, err
		}
		if _, err := ln.pc.Exec(ctx, heartbeatSQL); err != nil { // a beat's silence: speak
			return nil, err
		}
	}
}

// watch waits for notifications in a goroutine until ctx ends, and signals them on the
// returned channel (several at once as one). The returned function blocks until that
// goroutine has returned; call it once ctx has ended.
func (ln *listener) watch(ctx context.Context) (<-chan struct{}, func()) {
	heard := make(chan struct{}, 1)
	if ln.pc == nil { // not listening: see Semaphore.listen
		return heard, func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ln.wait(ctx) {
			select {
			case heard <- struct{}{}:
			default:
			}
		}
	})
	return heard, wg.Wait
}

// close stops listening and gives the connection back, or closes it if keep is false or
// UNLISTEN fails.
func (ln *listener) close(keep bool) {
	if ln.pc == nil {
		return
	}
	if keep {
		ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
		defer cancel()
		_, err := ln.pc.Exec(ctx, "UNLISTEN *")
		keep = err == nil
	}
	if !keep {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		ln.pc.Conn().Close(ctx)
	}
	ln.pc.Release() // pgxpool destroys a closed connection
}
