package advisory_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestWorkConnStringOfASharedHolding (issue 45): a holding on a shared session
// (WithSharedSessions) gives its work a connection string tagged for itself, not for the
// other holdings of its session, and the next holder's drain ends that work before its fn
// runs, leaving the session and its other holdings alone. (WithSharedSessions' godoc said
// WorkConnString refused a shared holding with ErrSharedSession; it never did, and work
// fencing is what a holder needs there too: the godoc now says it works.)
func TestWorkConnStringOfASharedHolding(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t, nil, advisory.WithSharedSessions(10))
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	other, err := m.Lock(ctx, name+"/other")
	require.NoError(t, err)
	require.True(t, l.SharesSession())
	require.Equal(t, l.PID(), other.PID(), "both holdings on one shared session")
	assert.NotEqual(t, l.WorkAppName(""), other.WorkAppName(""), "each holding tags its own work")

	tagged, err := l.WorkConnString(dsn(t))
	require.NoError(t, err, "a shared holding's work gets a connection string")
	work, err := pgx.Connect(ctx, tagged)
	require.NoError(t, err)
	defer work.Close(context.Background())
	var app string
	require.NoError(t, work.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app))
	require.True(t, strings.HasPrefix(app, l.WorkAppName("")), "the work carries the holding's tag: %q", app)
	workPID := work.PgConn().PID()
	require.NoError(t, l.Unlock(ctx))

	next := newManager(t, nil, advisory.WithDrainWait(0))
	require.NoError(t, next.Do(ctx, name, func(context.Context) error {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
			int32(workPID)).Scan(&n))
		assert.Zero(t, n, "the earlier holding's work is gone before the next holder's fn runs")
		return nil
	}))
	requireHeldBy(t, other.Key(), other.PID())
	require.NoError(t, other.Unlock(ctx))
}
