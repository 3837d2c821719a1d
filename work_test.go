package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// workConn opens a connection that does l's work, from connString (the test server's by
// default), closed when the test ends.
func workConn(t *testing.T, l *advisory.Lock, connString string) *pgx.Conn {
	t.Helper()
	if connString == "" {
		connString = dsn(t)
	}
	tagged, err := l.WorkConnString(connString)
	require.NoError(t, err)
	c, err := pgx.Connect(ctxT(t), tagged)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// slowWork starts, on c, a transaction that writes marker into work_marks and then sleeps
// for a minute before it would commit. It waits until the transaction is inside the
// sleep, and returns the backend's pid and a channel with the work's error.
func slowWork(t *testing.T, c *pgx.Conn, marker string) (uint32, <-chan error) {
	t.Helper()
	ctx := ctxT(t)
	marksOnce.Do(func() {
		_, marksErr = admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS work_marks (marker text)")
	})
	require.NoError(t, marksErr)
	var pid uint32 // the real backend's (behind a proxy PgConn.PID is the proxy's)
	require.NoError(t, c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		_, err := c.Exec(context.Background(), "BEGIN; INSERT INTO work_marks VALUES ($$"+marker+"$$); "+
			"SELECT pg_sleep(60); COMMIT")
		done <- err
	}()
	t.Cleanup(func() { // before the connection's own cleanup closes it
		admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
		<-finished
	})
	eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := admin.QueryRow(ctx, "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $1",
			int32(pid)).Scan(&waiting)
		return err == nil && waiting
	}, "work of backend %d in its sleep", pid)
	return pid, done
}

var (
	marksOnce sync.Once
	marksErr  error
)

// backendGone reports whether no session has the pid.
func backendGone(t testing.TB, pid uint32) bool {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
	return n == 0
}

func markerCommitted(t testing.TB, marker string) bool {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM work_marks WHERE marker = $1", marker).Scan(&n))
	return n > 0
}

// lostWithWork takes the lock with the given name on m, starts a tagged slow transaction
// for it, and then terminates the lock's backend: the lock is free, its holder's work
// still runs. It returns the work's backend pid and the work's error channel.
func lostWithWork(t *testing.T, m *advisory.Manager, name string) (uint32, <-chan error) {
	t.Helper()
	l, err := m.Lock(ctxT(t), name)
	require.NoError(t, err)
	pid, done := slowWork(t, workConn(t, l, ""), t.Name())
	terminate(t, l.PID())
	<-l.Done()
	return pid, done
}

// TestDoDrainsAnEarlierHoldersWork: the earlier holder's lock is gone but its tagged
// transaction still runs; Do terminates it, and it is gone and rolled back before fn is
// called.
func TestDoDrainsAnEarlierHoldersWork(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(0))
	workPID, workDone := lostWithWork(t, first, name)
	called := false
	err := second.Do(ctxT(t), name, func(ctx context.Context) error {
		called = true
		require.True(t, backendGone(t, workPID), "the earlier holder's work backend runs while fn does")
		require.False(t, markerCommitted(t, t.Name()), "the earlier holder's work committed")
		require.NotNil(t, advisory.LockFromContext(ctx))
		return nil
	})
	require.NoError(t, err)
	require.True(t, called)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, <-workDone, &pgErr, "the work's transaction must have been cut off")
	assert.Equal(t, "57P01", pgErr.Code, "terminated by the drain")
	require.False(t, markerCommitted(t, t.Name()))
	requireNoAcquired(t, second)
}

// TestDrainReportsAndSparesItsOwnWork: Drain terminates an earlier holding's session
// after the drain wait, reports it, and leaves the current holding's own work alone.
func TestDrainReportsAndSparesItsOwnWork(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(200*time.Millisecond))
	workPID, _ := lostWithWork(t, first, name)
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	own := workConn(t, l, "")
	start := time.Now()
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1, "%+v", report)
	ds := report.Sessions[0]
	assert.Equal(t, workPID, ds.PID)
	assert.True(t, ds.Terminated, "a sleeping transaction does not end on its own")
	assert.GreaterOrEqual(t, ds.After, 200*time.Millisecond, "terminated before the drain wait")
	assert.GreaterOrEqual(t, time.Since(start), ds.After)
	assert.True(t, strings.HasPrefix(ds.ApplicationName, "pgadv/"), ds.ApplicationName)
	assert.Equal(t, "active", ds.State)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, own.Ping(ctxT(t)), "the holding's own work connection was touched")
	again, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, again.Sessions)
	requireHeldBy(t, advisory.KeyOf(name), l.PID())
	require.NoError(t, l.Unlock(ctxT(t)))
}

// TestDrainWaitsForSessionsThatEndOnTheirOwn: a session whose client goes away within
// the drain wait is not terminated.
func TestDrainWaitsForSessionsThatEndOnTheirOwn(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(30*time.Second))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	c := workConn(t, l1, "")
	workPID := c.PgConn().PID()
	require.NoError(t, l1.Unlock(ctxT(t)))
	l2, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, func() { c.Close(context.Background()) })
	report, err := l2.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	assert.False(t, report.Sessions[0].Terminated, "ended on its own")
	assert.Equal(t, workPID, report.Sessions[0].PID)
	assert.Less(t, report.Took, 30*time.Second)
	require.NoError(t, l2.Unlock(ctxT(t)))
}

// TestDrainSparesSharedHoldersThatStillHold: a shared holder's work is drained by
// another shared holder only once the first no longer holds the lock.
func TestDrainSparesSharedHoldersThatStillHold(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(0))
	a, err := first.LockShared(ctxT(t), name)
	require.NoError(t, err)
	workPID, _ := slowWork(t, workConn(t, a, ""), t.Name())
	b, err := second.LockShared(ctxT(t), name)
	require.NoError(t, err)
	report, err := b.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Sessions, "a co-holder's work was drained")
	require.False(t, backendGone(t, workPID))
	require.NoError(t, a.Unlock(ctxT(t)))
	report, err = b.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	assert.Equal(t, workPID, report.Sessions[0].PID)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, b.Unlock(ctxT(t)))
}

// TestDrainIsScopedToTheLock: work tagged for another key, or another holding on the
// same backend's earlier lock, is told apart by the tag.
func TestDrainIsScopedToTheLock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithDrainWait(0))
	other, err := m.Lock(ctxT(t), t.Name()+"/other")
	require.NoError(t, err)
	otherPID, _ := slowWork(t, workConn(t, other, ""), t.Name()+"/other")
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Sessions)
	require.False(t, backendGone(t, otherPID))
	require.NoError(t, l.Unlock(ctxT(t)))
	require.NoError(t, other.Unlock(ctxT(t)))
}

// TestDrainWithoutPrivilegeStartsNothing: a role that may not terminate the earlier
// holder's session (a superuser's) gets ErrWorkNotDrained naming the privilege; Do does
// not call fn and leaves the lock free.
func TestDrainWithoutPrivilegeStartsNothing(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first := newManager(t, nil)
	workPID, _ := lostWithWork(t, first, name)
	role := tempRole(t)
	second := newManager(t, []string{"user=" + role, "password=pw"}, advisory.WithDrainWait(0))
	err := second.Do(ctxT(t), name, func(ctx context.Context) error {
		t.Error("fn ran while an earlier holder's work still runs")
		return nil
	})
	require.ErrorIs(t, err, advisory.ErrWorkNotDrained)
	assert.Contains(t, err.Error(), "GRANT pg_signal_backend TO")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code)
	require.False(t, backendGone(t, workPID))
	requireFree(t, advisory.KeyOf(name))
	requireNoAcquired(t, second)
	terminate(t, workPID)
}

// tempRole creates a LOGIN role with password "pw", dropped with its sessions when the
// test ends.
func tempRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("work_%d", rand.Uint32())
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		eventually(t, 10*time.Second, func() bool {
			var n int
			require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n))
			return n == 0
		}, "sessions of role %s gone", role)
		_, err := admin.Exec(ctx, "DROP ROLE "+role)
		assert.NoError(t, err)
	})
	return role
}

// TestDrainSeesWorkStartedMeanwhile: sessions that appear while the drain waits are
// drained too.
func TestDrainSeesWorkStartedMeanwhile(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(500*time.Millisecond))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	early := workConn(t, l1, "")
	tagged, err := l1.WorkConnString(dsn(t))
	require.NoError(t, err)
	terminate(t, l1.PID())
	<-l1.Done()
	l2, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	var late *pgx.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a connection of the earlier holding opened after the drain began
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		late, err = pgx.Connect(context.Background(), tagged)
	}()
	report, derr := l2.Drain(ctxT(t))
	wg.Wait()
	require.NoError(t, err)
	defer late.Close(context.Background())
	require.NoError(t, derr)
	pids := []uint32{}
	for _, s := range report.Sessions {
		pids = append(pids, s.PID)
	}
	assert.ElementsMatch(t, []uint32{early.PgConn().PID(), late.PgConn().PID()}, pids)
	require.NoError(t, l2.Unlock(ctxT(t)))
}

// TestWorkConnectionsCarryTheTagAndSettings: a connection made from WorkConnString (URL
// and keyword/value forms) or WorkConfig shows the tag in application_name, keeps the
// caller's own name after it, and runs with the server settings on PostgreSQL 14+.
func TestWorkConnectionsCarryTheTagAndSettings(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctxT(t))
	tag := l.WorkAppName("")
	require.Regexp(t, `^pgadv/[0-9a-z]+/[0-9a-z]+/[0-9a-z]+\.[0-9a-z]{6}$`, tag)
	cc, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s application_name='my migrator'",
		cc.Host, cc.Port, cc.User, cc.Database)
	url := urlOf(t, "application_name=my%20migrator")
	cfg, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = "my migrator"
	l.WorkConfig(&cfg.Config)
	fromCfg, err := pgx.ConnectConfig(ctxT(t), cfg)
	require.NoError(t, err)
	defer fromCfg.Close(context.Background())
	for _, c := range []*pgx.Conn{workConn(t, l, kv), workConn(t, l, url), fromCfg} {
		var app, interval string
		var version int
		require.NoError(t, c.QueryRow(ctxT(t), "SELECT current_setting('application_name'), "+
			"current_setting('server_version_num')::int, coalesce(current_setting('client_connection_check_interval', true), '')").
			Scan(&app, &version, &interval))
		assert.Equal(t, tag+" my migrator", app)
		if version >= 140000 {
			assert.Equal(t, "1s", interval)
		}
	}
}

// TestWorkConfigRefusesConnectionsAfterTheLockEnded: no new work starts for a holding
// that is over.
func TestWorkConfigRefusesConnectionsAfterTheLockEnded(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	l.WorkConfig(&cfg.Config)
	require.NoError(t, l.Unlock(ctxT(t)))
	_, err = pgx.ConnectConfig(ctxT(t), cfg)
	require.ErrorIs(t, err, advisory.ErrNotHeld)
}

// TestLockFromContext: fn's ctx in Do, TryDo, DoTx and Lead carries the Lock; others do
// not.
func TestLockFromContext(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	require.Nil(t, advisory.LockFromContext(context.Background()))
	check := func(ctx context.Context) error {
		l := advisory.LockFromContext(ctx)
		if l == nil || l.Name() != t.Name() || l.Err() != nil {
			return errors.New("no held Lock in fn's ctx")
		}
		return nil
	}
	require.NoError(t, m.Do(ctxT(t), t.Name(), check))
	ran, err := m.TryDo(ctxT(t), t.Name(), 0, check)
	require.True(t, ran)
	require.NoError(t, err)
	require.NoError(t, m.DoTx(ctxT(t), t.Name(), func(ctx context.Context, _ pgx.Tx) error { return check(ctx) }))
	require.NoError(t, m.Lead(ctxT(t), t.Name(), check))
}

// TestWorkTagReachesLibpq: psql (libpq) connecting with WorkConnString's URL and
// keyword/value forms, and with WorkEnv's PGAPPNAME and PGOPTIONS, runs with the tag and
// the settings: libpq decodes the URL as pgx does.
func TestWorkTagReachesLibpq(t *testing.T) {
	t.Parallel()
	psql, err := exec.LookPath("psql")
	if err != nil {
		if pgtest.InCI() {
			t.Fatalf("CI=true and no psql (Debian: postgresql-client): %v", err)
		}
		t.Skip("no psql:", err)
	}
	m := newManager(t, nil)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctxT(t))
	cc, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s application_name='it\\'s mine'",
		cc.Host, cc.Port, cc.User, cc.Database)
	const query = "SELECT current_setting('application_name') || '|' || current_setting('server_version_num') || '|' || " +
		"coalesce(current_setting('client_connection_check_interval', true), '') || '|' || current_setting('tcp_user_timeout')"
	run := func(env []string, args ...string) string {
		cmd := exec.Command(psql, append(args, "-XAtc", query)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	tagged := func(s string) string { out, err := l.WorkConnString(s); require.NoError(t, err); return out }
	env := append(os.Environ(), "PGAPPNAME=from env", "PGOPTIONS=-c work_mem=8MB")
	for name, got := range map[string]string{
		"url":      run(os.Environ(), tagged(urlOf(t, "application_name=my%20app&sslmode=disable"))),
		"keywords": run(os.Environ(), tagged(kv)),
		"env":      run(l.WorkEnv(env), dsn(t)),
	} {
		parts := strings.Split(got, "|")
		require.Len(t, parts, 4, "%s: %q", name, got)
		want := map[string]string{"url": "my app", "keywords": "it's mine", "env": "from env"}[name]
		assert.Equal(t, l.WorkAppName(want), parts[0], name)
		if v, _ := strconv.Atoi(parts[1]); v >= 140000 {
			assert.Equal(t, "1s", parts[2], name)
		}
		assert.Equal(t, "30000", parts[3], "%s: tcp_user_timeout (ms) from the options", name)
	}
}

// urlOf returns the test server's connection settings as a URL with the given query.
func urlOf(t *testing.T, query string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	return fmt.Sprintf("postgres://%s@%s:%d/%s?%s", cc.User, cc.Host, cc.Port, cc.Database, query)
}

// TestDoCancelledDuringTheDrainLosesNothing: a Do whose ctx ends while its drain runs
// (cancelled from the Acquired hook, a few hundred microseconds after the lock is held)
// returns the ctx's error (or runs fn, if the drain was done), never a loss: the drain's
// statements are not interrupted by ctx. With a 10 ms cancel grace an interrupted
// statement often loses the connection, as a slow CancelRequest does under load
// (TestModel found it so).
func TestDoCancelledDuringTheDrainLosesNothing(t *testing.T) {
	t.Parallel()
	var cancelNext atomic.Pointer[context.CancelFunc]
	var delay atomic.Int64
	m := newManager(t, nil, advisory.WithCancelGrace(10*time.Millisecond),
		advisory.WithHooks(advisory.Hooks{Acquired: func(advisory.LockEvent) {
			if c := cancelNext.Load(); c != nil {
				time.AfterFunc(time.Duration(delay.Load()), *c)
			}
		}}))
	for i := range 60 {
		ctx, cancel := context.WithCancel(context.Background())
		cancelNext.Store(&cancel)
		delay.Store(int64(i%15) * int64(40*time.Microsecond))
		err := m.Do(ctx, t.Name(), func(context.Context) error { return nil })
		cancel()
		require.NotErrorIs(t, err, advisory.ErrLockLost, "try %d", i)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "try %d", i)
		}
	}
	requireNoAcquired(t, m)
	requireFree(t, advisory.KeyOf(t.Name()))
}

// TestWithoutDrainLeavesEarlierWorkAlone: with WithoutDrain, Do calls fn at once and an
// earlier holder's tagged work runs on (the caller chose that); Lock.Drain still drains.
func TestWithoutDrainLeavesEarlierWorkAlone(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithoutDrain(), advisory.WithDrainWait(0))
	workPID, _ := lostWithWork(t, first, name)
	require.NoError(t, second.Do(ctxT(t), name, func(context.Context) error {
		require.False(t, backendGone(t, workPID), "drained although WithoutDrain")
		return nil
	}))
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, l.Unlock(ctxT(t)))
}

// freezer forwards TCP connections to upstream until freeze: from then on it forwards
// nothing more either way and keeps every socket open, as a network that went silent
// would. closeAll closes them all (the client then sees its connection end), and the
// listener, so that new connections are refused at once.
type freezer struct {
	ln     net.Listener
	port   string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezer(t *testing.T, upstream string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &freezer{ln: ln, port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.pipe(s, c)
			go f.pipe(c, s)
		}
	}()
	t.Cleanup(f.closeAll)
	return f
}

func (f *freezer) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if f.frozen.Load() || err != nil {
			return // what arrives after the freeze is dropped, and nothing is closed
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

func (f *freezer) freeze() { f.frozen.Store(true) }

func (f *freezer) closeAll() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
}

// TestWorkConfigAsksTheServer: a work connection opened while this process has not yet
// heard of its lock's loss (the path to the server went silent, and the server terminated
// the lock's session meanwhile) is refused: it asks the server, which shows the lock's
// session not holding the lock. Without that question the connection would start work
// that the next holder's drain, run before the connection existed, never saw (found by
// TestWorkNeverOverlapsRandomized beside two CPU burners: a work connection still
// starting when the lock was lost committed 200 ms into the next holding).
func TestWorkConfigAsksTheServer(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	base, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	if strings.HasPrefix(base.Host, "/") {
		t.Skip("the test server is reached over a Unix socket: no TCP path to freeze")
	}
	f := startFreezer(t, net.JoinHostPort(base.Host, strconv.Itoa(int(base.Port))))
	m := newManager(t, []string{"host=127.0.0.1", "port=" + f.port})
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	work := func() error {
		cfg, err := pgx.ParseConfig(dsn(t))
		require.NoError(t, err)
		l.WorkConfig(&cfg.Config)
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			c.Close(ctx)
		}
		return err
	}
	require.NoError(t, work(), "while the lock is held")

	f.freeze()
	terminate(t, l.PID())
	eventually(t, 10*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "the server freed the lock")
	require.NoError(t, l.Err(), "this process has not heard of the loss: the path is silent")
	err = work()
	require.ErrorIs(t, err, advisory.ErrLockLost)
	assert.Contains(t, err.Error(), "not holding it")

	f.closeAll()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was not reported once the path closed")
	}
}
