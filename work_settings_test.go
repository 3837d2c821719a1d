package advisory_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestWorkThroughASessionPoolerFromADirectLock (issue 37, item 6): the lock is held on a
// direct connection, the work goes through a session-mode PgBouncer, which refuses an
// options startup parameter. A connection from WorkConnString, one from WorkConfig and
// psql run with WorkEnv (its DATABASE_URL the pooler's) all connect, carry the tag, and
// the next holder drains them through the pooler.
func TestWorkThroughASessionPoolerFromADirectLock(t *testing.T) {
	t.Parallel()
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t, nil)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	require.NotEmpty(t, l.WorkOptions(), "the lock's own connection is direct")

	fromString := workConn(t, l, b.DSN())
	cfg, err := pgx.ParseConfig(b.DSN())
	require.NoError(t, err)
	l.WorkConfig(&cfg.Config)
	fromConfig, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err, "WorkConfig through the pooler")
	t.Cleanup(func() { fromConfig.Close(context.Background()) })
	for _, c := range []*pgx.Conn{fromString, fromConfig} {
		var app string
		require.NoError(t, c.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app))
		assert.Equal(t, advisory.PooledWorkAppNameForTest(l, ""), app, "another address than the lock's: the pooled mark")
	}
	if psql, err := exec.LookPath("psql"); err == nil || pgtest.InCI() {
		require.NoError(t, err)
		cmd := exec.Command(psql, "-XAtc", "SELECT current_setting('application_name')", b.DSN())
		cmd.Env = l.WorkEnv(append(os.Environ(), "DATABASE_URL="+b.DSN()))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "psql with WorkEnv through the pooler: %s", out)
		assert.Equal(t, advisory.PooledWorkAppNameForTest(l, ""), strings.TrimSpace(string(out)))
	}

	works := []uint32{sleepingSession(t, fromString), sleepingSession(t, fromConfig)}
	terminate(t, l.PID())
	<-l.Done()
	next := newManager(t, nil, advisory.WithDrainWait(0))
	require.NoError(t, next.Do(ctx, name, func(context.Context) error {
		for _, pid := range works {
			require.True(t, backendGone(t, pid), "the earlier holder's work through the pooler runs while fn does")
		}
		return nil
	}))
}

// TestWorkConfigDecidesFromTheWorkConnection: WorkConfig gives a work connection the
// settings (set_config, after connecting) where that connection reaches its backend
// directly, whatever the lock's connection goes through; never through a pooler, where a
// session setting would reach other clients; and a setting the caller's own options
// chose wins.
func TestWorkConfigDecidesFromTheWorkConnection(t *testing.T) {
	t.Parallel()
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	ctx := ctxT(t)
	m, err := advisory.New(ctx, b.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctx)
	require.Empty(t, l.WorkOptions(), "the lock's connection goes through the pooler")

	settings := func(connString, options string) (interval, userTimeout string) {
		cfg, err := pgx.ParseConfig(connString)
		require.NoError(t, err)
		if options != "" {
			cfg.RuntimeParams["options"] = options
		}
		l.WorkConfig(&cfg.Config)
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		defer c.Close(context.Background())
		require.NoError(t, c.QueryRow(ctx, "SELECT coalesce(current_setting('client_connection_check_interval', true), ''), "+
			"current_setting('tcp_user_timeout')").Scan(&interval, &userTimeout))
		return interval, userTimeout
	}
	var version int
	require.NoError(t, admin.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version))
	interval, userTimeout := settings(dsn(t), "")
	assert.NotEqual(t, "0", userTimeout, "a direct work connection gets the settings")
	if version >= 140000 {
		assert.Equal(t, "1s", interval)
	}
	own := "-c tcp_user_timeout=0"
	if version >= 140000 { // client_connection_check_interval is 14's: 13 refuses the connection
		own += " -c client_connection_check_interval=0"
	}
	interval, userTimeout = settings(dsn(t), own)
	assert.Equal(t, "0", userTimeout, "the caller's own options win")
	if version >= 140000 {
		assert.Equal(t, "0", interval, "the caller's own options win")
	}
	_, userTimeout = settings(b.DSN(), "")
	assert.Equal(t, "0", userTimeout, "no session setting through a pooler")
}
