package faults_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestTokensNeverRepeatAcrossAnAsynchronousPromotion: a real primary with a real
// asynchronous streaming standby (Patroni's default). Tokens are taken and replicated;
// then the standby stops receiving WAL (primary_conninfo emptied, as a lagging or cut-off
// standby), the primary issues one more token that the standby never gets, and the
// standby is promoted. Before, the new primary's counter issued that same token again
// and accepted the stale holder's CheckToken (issue 44, item 4). Now a token carries its
// timeline's floor: the new primary's first token exceeds every token of the old
// timeline, and a token of the old timeline fails CheckToken there even before any new
// token is taken.
func TestTokensNeverRepeatAcrossAnAsynchronousPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the promotion test starts two servers")
	}
	serversLane.join(t)
	ctx := ctxT(t, 2*time.Minute)
	primary, standby := primaryWithStandby(t, ctx)

	old, err := advisory.New(ctx, primary.DSN())
	require.NoError(t, err)
	defer old.Close()
	require.NoError(t, old.CreateFenceTable(ctx))
	name := t.Name()
	replicated := takeToken(t, old, name)
	require.Equal(t, int64(1), replicated, "a cluster never promoted counts from 1")
	require.NoError(t, standby.CatchUp(ctx))

	admin := connect(t, standby.DSN())
	_, err = admin.Exec(ctx, "ALTER SYSTEM SET primary_conninfo = ''")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_wal_receiver").Scan(&n))
		return n == 0
	}, 30*time.Second, 20*time.Millisecond, "the standby still receives WAL")
	lost := takeToken(t, old, name) // issued on the old primary only
	require.Equal(t, int64(2), lost)

	require.NoError(t, standby.Promote(ctx))
	promoted, err := advisory.New(ctx, standby.DSN())
	require.NoError(t, err)
	defer promoted.Close()
	for _, stale := range []int64{replicated, lost} {
		err := checkOn(t, promoted, standby.DSN(), name, stale)
		require.ErrorIs(t, err, advisory.ErrStaleToken, "token %d of the old timeline accepted on the new primary", stale)
	}
	fresh := takeToken(t, promoted, name)
	require.Greater(t, fresh, lost, "the new primary issued a token not above the old primary's last")
	require.NoError(t, checkOn(t, promoted, standby.DSN(), name, fresh))
	require.ErrorIs(t, checkOn(t, promoted, standby.DSN(), name, lost), advisory.ErrStaleToken)
	next := takeToken(t, promoted, name)
	require.Equal(t, fresh+1, next, "tokens of one timeline count by one")

	// The old primary is still up and writable: a split brain. A Manager that has
	// reached the new primary must never lock on it.
	neverOnTheDeposed(t, standby.DSN(), primary.DSN(), name)
}

// neverOnTheDeposed: a Manager with a multi-host DSN (the promoted server first, the
// deposed one second) locks on the promoted server, which then stops accepting
// connections to its database; the pool's next connections reach the deposed primary,
// on an older timeline, and every Lock there fails with ErrServerChanged (issue 44,
// item 5: a Manager held a lock on a deposed primary while another held it on the new
// one).
func neverOnTheDeposed(t *testing.T, promotedDSN, deposedDSN, name string) {
	ctx := ctxT(t, time.Minute)
	m, err := advisory.New(ctx, multiHost(t, promotedDSN, deposedDSN)+" connect_timeout=5")
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, name+"/promoted")
	require.NoError(t, err)
	defer l.Unlock(ctx)
	require.Equal(t, []uint32{l.PID()}, holdersAt(t, promotedDSN, l.Key()))

	db := parse(t, promotedDSN).Database
	cfg, err := pgx.ParseConfig(promotedDSN)
	require.NoError(t, err)
	cfg.Database = "template1" // a database may not disallow connections to itself from a session of its own
	admin, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS false")
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS true")
	})
	// The pool's idle connections to the promoted server go, so that the next Locks
	// connect anew.
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = "+
		"'client backend' AND pid <> pg_backend_pid() AND pid <> $1", int32(l.PID()))
	require.NoError(t, err)
	key := advisory.KeyOf(name + "/deposed")
	refused := false
	for i := 0; i < 10 && !refused; i++ {
		other, err := m.Lock(ctx, name+"/deposed")
		require.Error(t, err, "a Lock was granted, on the deposed primary")
		if other != nil {
			other.Unlock(ctx)
		}
		refused = errors.Is(err, advisory.ErrServerChanged)
	}
	require.True(t, refused, "no Lock reached the deposed primary to be refused")
	require.Empty(t, holdersAt(t, deposedDSN, key), "a lock was taken on the deposed primary")
}

// takeToken takes name's lock on m, its token, and unlocks.
func takeToken(t *testing.T, m *advisory.Manager, name string) int64 {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	defer l.Unlock(ctx)
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	return tok
}

// checkOn runs m's CheckToken in a transaction on dsn, and rolls it back.
func checkOn(t *testing.T, m *advisory.Manager, dsn, name string, tok int64) error {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	tx, err := connect(t, dsn).Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	return m.CheckToken(ctx, tx, name, tok)
}

// connect is a plain connection to dsn, closed when the test ends.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctxT(t, 30*time.Second), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
