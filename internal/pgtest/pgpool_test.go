package pgtest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgpool: the helper puts a real Pgpool-II in front of the primary and a streaming
// standby, and it balances: with its defaults a statement with only STABLE functions
// reaches the standby from some client sessions, one with a VOLATILE function
// (pg_advisory_lock's kind) only the primary; with the function list its docs show, that
// one reaches the standby too.
func TestPgpool(t *testing.T) {
	primary := server(t)
	for _, conf := range []pgtest.PgpoolConfig{pgtest.PgpoolDefaults, pgtest.PgpoolFunctionList} {
		t.Run(conf.String(), func(t *testing.T) {
			pp, _ := pgtest.PgpoolForTest(t, primary, conf)
			ctx := ctxT(t)
			stableOnStandby, volatileOnStandby := 0, 0
			for range 20 { // each session has its load-balance node: 1 in 2 the standby
				conn := connect(t, pp.DSN())
				var s bool
				require.NoError(t, conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('transaction_read_only') = 'on'").Scan(&s))
				if s {
					stableOnStandby++
				}
				require.NoError(t, conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&s))
				if s {
					volatileOnStandby++
				}
				require.NoError(t, conn.Close(ctx))
			}
			t.Logf("of 20 sessions: a STABLE statement on the standby in %d, a VOLATILE one in %d",
				stableOnStandby, volatileOnStandby)
			assert.Positive(t, stableOnStandby, "Pgpool-II balances reads onto the standby\n%s", pp.Log())
			if conf == pgtest.PgpoolDefaults {
				assert.Zero(t, volatileOnStandby, "a VOLATILE function's statement goes to the primary")
			} else {
				assert.Positive(t, volatileOnStandby, "with write_function_list, only listed functions write")
			}
		})
	}
}
