package advisory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// sessionLease holds a pin's locks on the server session itself: pg_advisory_lock and
// pg_advisory_unlock, with the ownership token checked in each statement where the
// connection may not go straight to its backend (see ownedBy). Its statements are in
// statements.go, run by pin.go, pin_lock.go and pin_named.go.
type sessionLease struct{}

func (sessionLease) kind() Holding { return HoldingSession }

func (sessionLease) statements(m *Manager, t target, direct bool) statements {
	return m.texts.statements(m.activityName(t.name), t.shared, t.pair, direct)
}

func (sessionLease) take(p *pin, ctx context.Context, try bool) (uint32, *bool, error) {
	if d := p.m.set.heartbeat; d > 0 && !try { // a slice of the wait (p.sliced()): see pin_slices.go
		p.cancel.SetWaiting(true)
		defer p.cancel.SetWaiting(false)
		return p.sliceRow(ctx, sliceText(p.st.lock, keyLiteral(p.key), p.token, d))
	}
	return p.waitRow(ctx, try)
}

func (sessionLease) check(p *pin, pid uint32, got *bool, err error) error {
	return p.checkBackend(pid, got, err)
}

func (sessionLease) clear(p *pin, cancelSent bool) error {
	return p.reconcile(p.key, p.st, cancelSent)
}

// unlock: a session holding's writes committed each with its own transaction: keep is
// moot.
func (sessionLease) unlock(p *pin, ctx context.Context, _ bool) error {
	pid, ok, err := p.unlockRow(ctx)
	if err == nil {
		err = p.checkOwned(pid, ok)
	}
	if err == nil && !*ok {
		return errNotHeldByServer
	}
	return err
}

func (sessionLease) idle() byte { return 'I' }

func (sessionLease) keeps(*pin) bool { return true }

func (sessionLease) beginFn(p *pin, ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return p.begin(ctx, opts)
}

func (sessionLease) commitFn(p *pin, ctx context.Context, tx pgx.Tx) (bool, error) {
	return p.commit(ctx, tx)
}
