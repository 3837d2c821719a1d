package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const leaseDDL = `
CREATE TABLE IF NOT EXISTS bench_lease_insert (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS bench_lease_update (name text PRIMARY KEY, owner text, expires_at timestamptz NOT NULL DEFAULT '-infinity');`

// leaseLocker is a lock held as a row with an owner and an expiry (pattern "insert":
// INSERT … ON CONFLICT … WHERE expired; pattern "update": UPDATE … WHERE owner OR
// expired), renewed by a heartbeat while held, taken by polling.
type leaseLocker struct {
	pool           *pgxpool.Pool
	pattern, name  string
	owner          string
	stopHeartbeats chan struct{}
}

func (l *leaseLocker) try(ctx context.Context) (bool, error) {
	ttl := fmt.Sprintf("%d milliseconds", leaseTTL.Milliseconds())
	var sql string
	switch l.pattern {
	case "insert":
		sql = `INSERT INTO bench_lease_insert VALUES ($1, $2, now() + $3::interval)
			ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at
			WHERE bench_lease_insert.expires_at < now()`
	default:
		if _, err := l.pool.Exec(ctx, "INSERT INTO bench_lease_update (name) VALUES ($1) ON CONFLICT DO NOTHING", l.name); err != nil {
			return false, err
		}
		sql = `UPDATE bench_lease_update SET owner = $2, expires_at = now() + $3::interval
			WHERE name = $1 AND (owner IS NULL OR owner = $2 OR expires_at < now())`
	}
	tag, err := l.pool.Exec(ctx, sql, l.name, l.owner, ttl)
	return err == nil && tag.RowsAffected() == 1, err
}

func (l *leaseLocker) acquire(ctx context.Context) error {
	for {
		ok, err := l.try(ctx)
		if err != nil {
			return err
		}
		if ok {
			l.stopHeartbeats = make(chan struct{})
			go l.heartbeat(l.stopHeartbeats)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(leasePoll):
		}
	}
}

func (l *leaseLocker) heartbeat(stop chan struct{}) {
	table := "bench_lease_" + l.pattern
	for {
		select {
		case <-stop:
			return
		case <-time.After(leaseHeartbeat):
			l.pool.Exec(context.Background(), "UPDATE "+table+" SET expires_at = now() + $3::interval WHERE name = $1 AND owner = $2",
				l.name, l.owner, fmt.Sprintf("%d milliseconds", leaseTTL.Milliseconds()))
		}
	}
}

func (l *leaseLocker) release(ctx context.Context) error {
	if l.stopHeartbeats != nil {
		close(l.stopHeartbeats)
		l.stopHeartbeats = nil
	}
	sql := "DELETE FROM bench_lease_insert WHERE name = $1 AND owner = $2"
	if l.pattern == "update" {
		sql = "UPDATE bench_lease_update SET owner = NULL WHERE name = $1 AND owner = $2"
	}
	_, err := l.pool.Exec(ctx, sql, l.name, l.owner)
	return err
}

func newLease(b *bench, pattern, name string) *leaseLocker {
	return &leaseLocker{pool: b.admin, pattern: pattern, name: name, owner: fmt.Sprintf("bench-%d", rand.Int64())}
}

func leaseCycle(ctx context.Context, b *bench, pattern string) (float64, error) {
	l := newLease(b, pattern, b.key("leasecycle"))
	return timed(func() error {
		if err := l.acquire(ctx); err != nil {
			return err
		}
		return l.release(ctx)
	})
}

func leaseHandoff(ctx context.Context, b *bench, pattern string) (float64, error) {
	name := b.key("leasehandoff")
	holder, waiter := newLease(b, pattern, name), newLease(b, pattern, name)
	if err := holder.acquire(ctx); err != nil {
		return 0, err
	}
	v, err := handoff(func() error { return waiter.acquire(ctx) }, func() error { return holder.release(ctx) }, leasePoll)
	if err != nil {
		return 0, err
	}
	return v, waiter.release(ctx)
}
