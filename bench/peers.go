package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3/lock"
)

// Lease-table patterns as blog posts describe them: a row per lock with an owner and an
// expiry, renewed by a heartbeat, taken by polling. These parameters are ours.
const (
	leaseTTL       = 10 * time.Second
	leasePoll      = time.Second
	leaseHeartbeat = 3 * time.Second
)

func peerRows() []*row {
	// Peers run unpinned: their floors are the unpinned rows.
	unpinned := placement{Name: "unpinned"}
	ref, handoff, kill := at(floorBackground, unpinned), at(handoffFloor, unpinned), "raw SIGKILL takeover"
	rows := []*row{
		{Name: "goose SessionLocker: lock + unlock", Group: "peer", Floor: ref, Unit: "ms", per: 5, sample: gooseSessionCycle},
		{Name: "goose SessionLocker: handoff (polls every 5 s)", Group: "peer", Floor: handoff, Unit: "ms", per: 1, sample: gooseSessionHandoff},
		{Name: "goose TableLocker: lock + unlock", Group: "peer", Floor: ref, Unit: "ms", per: 5, sample: gooseTableCycle},
		{Name: "goose TableLocker: handoff (polls every 5 s)", Group: "peer", Floor: handoff, Unit: "ms", per: 1, sample: gooseTableHandoff},
		{Name: "goose TableLocker: crash takeover (30 s lease)", Group: "peer", Floor: kill, Unit: "ms", per: 1,
			sample: func(ctx context.Context, b *bench) (float64, error) { return peerCrash(ctx, b, "goose-table") }},
	}
	for _, p := range []string{"insert", "update"} {
		title := map[string]string{"insert": "lease table (INSERT … ON CONFLICT … WHERE expired)",
			"update": "lease table (UPDATE … WHERE owner OR expired)"}[p]
		rows = append(rows,
			&row{Name: title + ": lock + unlock", Group: "peer", Floor: ref, Unit: "ms", per: 5,
				sample: func(ctx context.Context, b *bench) (float64, error) { return leaseCycle(ctx, b, p) }},
			&row{Name: title + ": handoff (polls every 1 s)", Group: "peer", Floor: handoff, Unit: "ms", per: 1,
				sample: func(ctx context.Context, b *bench) (float64, error) { return leaseHandoff(ctx, b, p) }},
			&row{Name: title + ": crash takeover (10 s lease)", Group: "peer", Floor: kill, Unit: "ms", per: 1,
				sample: func(ctx context.Context, b *bench) (float64, error) { return peerCrash(ctx, b, "lease-"+p) }},
		)
	}
	return rows
}

func quietGooseTable() (lock.Locker, error) {
	return lock.NewPostgresTableLocker(lock.WithTableLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

func gooseSessionCycle(ctx context.Context, b *bench) (float64, error) {
	l, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, err
	}
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return timed(func() error {
		if err := l.SessionLock(ctx, conn); err != nil {
			return err
		}
		return l.SessionUnlock(ctx, conn)
	})
}

// inBackground starts acquire and returns a function that waits for it: when it got the
// lock, or its error.
func inBackground(acquire func() error) func() (time.Time, error) {
	got := make(chan time.Time, 1)
	errc := make(chan error, 1)
	go func() {
		if err := acquire(); err != nil {
			errc <- err
			return
		}
		got <- time.Now()
	}()
	return func() (time.Time, error) {
		select {
		case at := <-got:
			return at, nil
		case err := <-errc:
			return time.Time{}, err
		}
	}
}

// handoff measures from release() to when the waiter, already trying in acquire, gets
// the lock. The release comes at a random moment of the waiter's polling period.
func handoff(acquire func() error, release func() error, period time.Duration) (float64, error) {
	wait := inBackground(acquire)
	time.Sleep(100*time.Millisecond + rand.N(period))
	start := time.Now()
	if err := release(); err != nil {
		return 0, err
	}
	at, err := wait()
	return ms(at.Sub(start)), err
}

func gooseSessionHandoff(ctx context.Context, b *bench) (float64, error) {
	l, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, err
	}
	holder, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer holder.Close()
	waiter, err := b.db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer waiter.Close()
	if err := l.SessionLock(ctx, holder); err != nil {
		return 0, err
	}
	v, err := handoff(func() error { return l.SessionLock(ctx, waiter) },
		func() error { return l.SessionUnlock(ctx, holder) }, 5*time.Second)
	if err != nil {
		return 0, err
	}
	return v, l.SessionUnlock(ctx, waiter)
}

func gooseTableCycle(ctx context.Context, b *bench) (float64, error) {
	l, err := quietGooseTable()
	if err != nil {
		return 0, err
	}
	return timed(func() error {
		if err := l.Lock(ctx, b.db); err != nil {
			return err
		}
		return l.Unlock(ctx, b.db)
	})
}

func gooseTableHandoff(ctx context.Context, b *bench) (float64, error) {
	holder, err := quietGooseTable()
	if err != nil {
		return 0, err
	}
	waiter, err := quietGooseTable()
	if err != nil {
		return 0, err
	}
	if err := holder.Lock(ctx, b.db); err != nil {
		return 0, err
	}
	v, err := handoff(func() error { return waiter.Lock(ctx, b.db) },
		func() error { return holder.Unlock(ctx, b.db) }, 5*time.Second)
	if err != nil {
		return 0, err
	}
	return v, waiter.Unlock(ctx, b.db)
}

// peerCrash SIGKILLs a holder process of a peer and measures until a waiter (polling
// in this process) gets the lock: the lease must run out first.
func peerCrash(ctx context.Context, b *bench, role string) (float64, error) {
	name := b.key("crash")
	h, err := b.holder(role, name)
	if err != nil {
		return 0, err
	}
	acquire, release, err := b.peerLocker(ctx, role, name)
	if err != nil {
		h.Process.Kill()
		h.Wait()
		return 0, err
	}
	wait := inBackground(acquire)
	v, err := killTakeover(h, func() error { time.Sleep(200 * time.Millisecond); return nil }, wait)
	if err != nil {
		return 0, err
	}
	return v, release()
}

// peerLocker returns acquire and release for a peer role in this process.
func (b *bench) peerLocker(ctx context.Context, role, name string) (func() error, func() error, error) {
	switch role {
	case "goose-table":
		l, err := quietGooseTable()
		if err != nil {
			return nil, nil, err
		}
		return func() error { return l.Lock(ctx, b.db) }, func() error { return l.Unlock(ctx, b.db) }, nil
	case "lease-insert", "lease-update":
		l := newLease(b, role[len("lease-"):], name)
		return func() error { return l.acquire(ctx) }, func() error { return l.release(ctx) }, nil
	}
	return nil, nil, fmt.Errorf("unknown peer %q", role)
}

// holdPeer is a holder process's side of peerCrash.
func holdPeer(ctx context.Context, role, dsn, name string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	b := &bench{dsn: dsn, admin: pool}
	cfgDB, err := openDB(dsn)
	if err != nil {
		return err
	}
	b.db = cfgDB
	acquire, _, err := b.peerLocker(ctx, role, name)
	if err != nil {
		return err
	}
	return acquire()
}

func openDB(dsn string) (*sql.DB, error) {
	return sql.Open("pgx", dsn)
}
