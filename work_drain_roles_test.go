package advisory_test

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// forgedTag builds, as anyone who can log in can, a work tag of the lock name: the
// database's oid (from pg_database) and the key (pgadvisory hash), with a holder that
// never held it.
func forgedTag(t *testing.T, name string) string {
	t.Helper()
	var oid uint32
	require.NoError(t, admin.QueryRow(ctxT(t),
		"SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oid))
	return "pgadv/" + strconv.FormatUint(uint64(oid), 36) + "/" +
		strconv.FormatUint(uint64(advisory.KeyOf(name)), 36) + "/1.aaaaaa"
}

// forger connects as a LOGIN-only role of its own to another database (forgersDatabase)
// with app as its application_name, and stays idle; it returns the session's pid.
func forger(t *testing.T, app string) uint32 {
	t.Helper()
	db := forgersDatabase(t)
	role := tempRole(t)
	c, err := pgx.Connect(ctxT(t), dsn(t, "user="+role, "password=pw", "dbname="+db, "application_name="+app))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c.PgConn().PID()
}

// sleepingSession starts pg_sleep(60) on c, tagged or not, and waits until it sleeps;
// it returns the backend's pid (behind a proxy PgConn.PID is the proxy's).
func sleepingSession(t *testing.T, c *pgx.Conn) uint32 {
	t.Helper()
	var pid uint32
	require.NoError(t, c.QueryRow(ctxT(t), "SELECT pg_backend_pid()").Scan(&pid))
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c.Exec(context.Background(), "SELECT pg_sleep(60)")
	}()
	t.Cleanup(func() {
		admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
		<-finished
	})
	eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := admin.QueryRow(ctxT(t), "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $1",
			int32(pid)).Scan(&waiting)
		return err == nil && waiting
	}, "backend %d in its sleep", pid)
	return pid
}

// TestDrainIgnoresAForgedTag (issue 37, item 1): holders that run as a LOGIN-only role,
// without pg_signal_backend, meet a session of another LOGIN-only role, in another database,
// whose application_name carries a forged tag of their lock. Their own earlier holder's
// work (their role) is drained as before; the forger's session stops nobody: Do runs fn,
// Lead leads, and the session is left alone.
func TestDrainIgnoresAForgedTag(t *testing.T) {
	t.Parallel()
	name := t.Name()
	holder := tempRole(t)
	as := []string{"user=" + holder, "password=pw"}
	forgedPID := forger(t, forgedTag(t, name))

	first := newManager(t, as)
	l, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	ownWork := sleepingSession(t, workConn(t, l, dsn(t, as...)))
	terminate(t, l.PID())
	<-l.Done()

	rec := &recorder{}
	second := newManager(t, as, advisory.WithDrainWait(0), advisory.WithLogger(slog.New(rec)))
	ran := false
	err = second.Do(ctxT(t), name, func(context.Context) error {
		ran = true
		require.True(t, backendGone(t, ownWork), "the earlier holder's own work runs while fn does")
		return nil
	})
	require.NoError(t, err)
	require.True(t, ran, "fn ran")
	require.False(t, backendGone(t, forgedPID), "the forger's session was left alone")
	logged := rec.find("advisory: ignored a session that carries the lock's work tag")
	require.NotNil(t, logged, "the ignored session is logged")
	assert.Equal(t, slog.LevelWarn, logged["level"])
	assert.EqualValues(t, forgedPID, logged["pid"])

	l, err = second.Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Sessions)
	assert.Equal(t, holder, report.Role)
	require.Len(t, report.Ignored, 1, "%+v", report)
	ig := report.Ignored[0]
	assert.Equal(t, forgedPID, ig.PID)
	assert.Equal(t, forgedTag(t, name), ig.ApplicationName)
	assert.NotEqual(t, holder, ig.User)
	assert.Contains(t, ig.Reason, `its role "`+ig.User+`" is neither the drain's role "`+holder+`"`)
	require.NoError(t, l.Unlock(ctxT(t)))

	led := false
	lctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	require.NoError(t, second.Lead(lctx, name, func(context.Context) error { led = true; return nil }))
	require.True(t, led, "Lead led")
	require.False(t, backendGone(t, forgedPID))
	requireFree(t, advisory.KeyOf(name))
}

// TestSuperusersDrainTerminatesAForgedTag: a superuser has the privileges of every role:
// its drain covers a forger's session too, and terminates it rather than wait for it.
func TestSuperusersDrainTerminatesAForgedTag(t *testing.T) {
	t.Parallel()
	name := t.Name()
	forgedPID := forger(t, forgedTag(t, name))
	l, err := newManager(t, nil, advisory.WithDrainWait(0)).Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Ignored)
	require.Len(t, report.Sessions, 1)
	assert.Equal(t, forgedPID, report.Sessions[0].PID)
	assert.True(t, report.Sessions[0].Terminated)
	require.True(t, backendGone(t, forgedPID))
	require.NoError(t, l.Unlock(ctxT(t)))
}

// superuser returns the name of the test server's superuser (the admin pool's role).
func superuser(t *testing.T) string {
	t.Helper()
	var name string
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT current_user").Scan(&name))
	return name
}

// TestDrainWaitsForTheWorkRoles: the holders lock as one LOGIN-only role and work as
// another. Without WithWorkRoles the earlier holder's work is ignored (reported, left
// running); with it, the drain covers the work role: without pg_signal_backend that is
// ErrWorkNotDrained naming the grant, and once granted the session is terminated.
func TestDrainWaitsForTheWorkRoles(t *testing.T) {
	t.Parallel()
	name := t.Name()
	holder, worker := tempRole(t), tempRole(t)
	as := []string{"user=" + holder, "password=pw"}
	l, err := newManager(t, as).Lock(ctxT(t), name)
	require.NoError(t, err)
	work := sleepingSession(t, workConn(t, l, dsn(t, "user="+worker, "password=pw")))
	terminate(t, l.PID())
	<-l.Done()

	drain := func(opts ...advisory.Option) (advisory.DrainReport, error) {
		l, err := newManager(t, as, append(opts, advisory.WithDrainWait(0))...).Lock(ctxT(t), name)
		require.NoError(t, err)
		defer l.Unlock(ctxT(t))
		return l.Drain(ctxT(t))
	}
	report, err := drain()
	require.NoError(t, err)
	require.Len(t, report.Ignored, 1)
	assert.Equal(t, worker, report.Ignored[0].User)
	assert.Contains(t, report.Ignored[0].Reason, "WithWorkRoles does not name it")
	require.False(t, backendGone(t, work))

	report, err = drain(advisory.WithWorkRoles("someone_else", worker))
	require.ErrorIs(t, err, advisory.ErrWorkNotDrained)
	assert.Contains(t, err.Error(), `GRANT pg_signal_backend TO "`+holder+`"`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code)
	assert.Empty(t, report.Ignored)
	require.Len(t, report.Sessions, 1)
	require.False(t, backendGone(t, work))

	_, err = admin.Exec(ctxT(t), "GRANT pg_signal_backend TO "+holder)
	require.NoError(t, err)
	report, err = drain(advisory.WithWorkRoles(worker))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	assert.True(t, report.Sessions[0].Terminated)
	require.True(t, backendGone(t, work))
}

// TestWorkRolesOption: WithWorkRoles refuses a name no role can have.
func TestWorkRolesOption(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]string{{""}, {"ok", "nul\x00"}, {strings.Repeat("r", 64)}} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1", advisory.WithWorkRoles(bad...))
		require.ErrorIs(t, err, advisory.ErrInvalidOption, "%q", bad)
	}
	_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 connect_timeout=1",
		advisory.WithWorkRoles(strings.Repeat("r", 63), "Mixed Case"))
	require.NotErrorIs(t, err, advisory.ErrInvalidOption)
}
