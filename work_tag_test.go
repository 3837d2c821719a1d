package advisory_test

import (
	"context"
	"fmt"
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
	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	// No heartbeat (behind a proxy it is on by default): the process must not hear of the
	// loss through the silent path before the work connection asks the server.
	m := newManager(t, []string{"host=127.0.0.1", "port=" + f.port}, advisory.WithHeartbeat(0))
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
