package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// A re-entered Lock works on its holding: transactions, tokens and the work tag are the
// holding's. A transaction in progress on the holding cannot be re-entered.

// TestNestedDoTx: a DoTx under Do runs its transaction on the holding's connection. On
// a session holding it commits at once; on a transaction holding its writes join the
// holding's transaction and commit with the holding's release, as every BeginFunc's do.
// A DoTx inside a DoTx's (or BeginFunc's) fn would wait for the transaction it runs in:
// ErrNotReentrant at once, and the outer transaction goes on and commits.
func TestNestedDoTx(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		table := createRowsTable(t)
		insert := func(ctx context.Context, tx pgx.Tx, v string) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v)
			return err
		}
		err := m.Do(ctx, name, func(ctx context.Context) error {
			_, err := atOnce(t, ctx, "DoTx", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, m.DoTx(ctx, name, func(ctx context.Context, tx pgx.Tx) error { return insert(ctx, tx, "nested") })
			})
			require.NoError(t, err)
			if m.Holding() == advisory.HoldingSession {
				require.Equal(t, []string{"nested"}, rowsOf(t, table), "committed by the nested DoTx")
			} else {
				require.Empty(t, rowsOf(t, table), "pending in the holding's transaction")
			}
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{"nested"}, rowsOf(t, table), "committed by the holding's release")

		err = m.DoTx(ctx, name, func(ctx context.Context, tx pgx.Tx) error {
			require.NoError(t, insert(ctx, tx, "outer"))
			_, err := atOnce(t, ctx, "DoTx in DoTx", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, m.DoTx(ctx, name, func(ctx context.Context, tx pgx.Tx) error { return insert(ctx, tx, "never") })
			})
			require.ErrorIs(t, err, advisory.ErrNotReentrant)
			return nil
		})
		require.NoError(t, err)
		require.Equal(t, []string{"nested", "outer"}, rowsOf(t, table))
		requireFree(t, advisory.KeyOf(name))
		requireNoAcquired(t, m)
	})
}

// TestReenteredLockInsideBeginFunc: inside BeginFunc's fn, a re-entered Lock's
// BeginFunc, Token and Drain would wait for that very transaction: ErrNotReentrant, at
// once. Its Unlock needs no connection and succeeds.
func TestReenteredLockInsideBeginFunc(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		outer, err := m.Lock(ctx, name)
		require.NoError(t, err)
		under := advisory.ContextWithLock(ctx, outer)
		err = outer.BeginFunc(ctx, func(pgx.Tx) error {
			inner, err := atOnce(t, under, "Lock", func(ctx context.Context) (*advisory.Lock, error) { return m.Lock(ctx, name) })
			require.NoError(t, err)
			_, err = atOnce(t, under, "BeginFunc", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, inner.BeginFunc(ctx, func(pgx.Tx) error { return nil })
			})
			require.ErrorIs(t, err, advisory.ErrNotReentrant)
			_, err = atOnce(t, under, "Token", inner.Token)
			require.ErrorIs(t, err, advisory.ErrNotReentrant)
			_, err = atOnce(t, under, "Drain", inner.Drain)
			require.ErrorIs(t, err, advisory.ErrNotReentrant)
			require.Len(t, libraryPrefix.FindAllString(err.Error(), -1), 1, "one prefix: %v", err)
			return inner.Unlock(ctx)
		})
		require.NoError(t, err)
		require.NoError(t, outer.Unlock(ctx))
		requireNoAcquired(t, m)
	})
}

// TestReenteredLockUsesTheHoldingsTokenAndWork: a re-entered Lock's Token is the
// holding's; its work tag is the holding's, so that its Drain, and a nested Do, spare the
// work the outer holding started (a tagged connection stays up).
func TestReenteredLockUsesTheHoldingsTokenAndWork(t *testing.T) {
	for _, h := range []advisory.Holding{advisory.HoldingSession, advisory.HoldingTransaction} {
		t.Run(h.String(), func(t *testing.T) {
			t.Parallel()
			m := fenceManagersWith(t, 1, func(int) []advisory.Option {
				return []advisory.Option{advisory.WithHolding(h)}
			})[0]
			ctx, name := ctxT(t), t.Name()
			err := m.Do(ctx, name, func(ctx context.Context) error {
				outer := advisory.LockFromContext(ctx)
				tok, err := outer.Token(ctx)
				require.NoError(t, err)
				work, err := pgx.Connect(ctx, must(outer.WorkConnString(dsn(t))))
				require.NoError(t, err)
				defer work.Close(context.Background())
				nested := func(ctx context.Context) error {
					inner := advisory.LockFromContext(ctx)
					require.True(t, inner.Reentered())
					got, err := inner.Token(ctx)
					require.NoError(t, err)
					require.Equal(t, tok, got, "the holding's token")
					require.Equal(t, outer.WorkAppName(""), inner.WorkAppName(""), "the holding's work tag")
					report, err := inner.Drain(ctx)
					require.NoError(t, err)
					require.Empty(t, report.Sessions, "the holding's own work is not an earlier holder's")
					return nil
				}
				_, err = atOnce(t, ctx, "Do", func(ctx context.Context) (struct{}, error) {
					return struct{}{}, m.Do(ctx, name, nested)
				})
				require.NoError(t, err)
				require.NoError(t, work.Ping(ctx), "the outer holding's work connection is up")
				return nil
			})
			require.NoError(t, err)
			requireNoAcquired(t, m)
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
