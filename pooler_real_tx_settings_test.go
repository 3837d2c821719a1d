package advisory_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgBouncerTransactionHoldingCarriesItsSettings (issue 47): every setting a
// transaction holding carries is in force on the server session it runs on, although
// PgBouncer's connect_query gave that session other values for every one of them (the
// server's timeouts, a keepalive of its own), and none is left on it after the Unlock.
// Read in BeginFunc's fn, inside the holding's transaction, where lock_timeout is fn's 0
// rather than the wait's slice.
func TestPgBouncerTransactionHoldingCarriesItsSettings(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	server := serverTimeouts(t)
	server["tcp_keepalives_idle"], server["tcp_keepalives_interval"] = "77", "7"
	server["tcp_keepalives_count"], server["tcp_user_timeout"] = "7", "77000"
	want := map[string]string{"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "4",
		"tcp_user_timeout": "30000", "lock_timeout": "0", "statement_timeout": "0", "idle_in_transaction_session_timeout": "0"}
	for _, name := range settingsToCheck(t) {
		switch name {
		case "client_connection_check_interval":
			server[name], want[name] = "7s", "1s"
		case "transaction_timeout":
			want[name] = "0"
		}
	}
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithConnectQuery(connectQuery(server)))
	ctx := ctxT(t)
	l, err := pooledManager(t, b).Lock(ctx, t.Name())
	require.NoError(t, err)
	got := map[string]string{}
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		for name := range want {
			var v string
			if err := tx.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
				return err
			}
			got[name] = v
		}
		return nil
	}))
	require.Equal(t, want, got, "the settings on the holding's server session")
	require.NoError(t, l.Unlock(ctx))
	requireNoSettingLeaked(t, b, server)
}
