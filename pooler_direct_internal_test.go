package advisory

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// endsConn is a net.Conn that only reports addresses: directPath reads nothing else.
type endsConn struct {
	net.Conn
	local, remote net.Addr
}

func (c endsConn) LocalAddr() net.Addr  { return c.local }
func (c endsConn) RemoteAddr() net.Addr { return c.remote }

func TestDirectPathNeedsBothEndsToMatch(t *testing.T) {
	tcp := func(ip string, port int) *net.TCPAddr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	client, server := tcp("127.0.0.1", 40001), tcp("127.0.0.1", 5432)
	conn := endsConn{local: client, remote: server}
	same := look{clientAddr: "127.0.0.1", clientPort: 40001, serverAddr: "127.0.0.1", serverPort: 5432}
	for _, tc := range []struct {
		name string
		conn net.Conn
		look look
		want bool
	}{
		{"the backend sees our socket", conn, same, true},
		{"IPv4-mapped on a dual-stack listener", conn,
			look{clientAddr: "::ffff:127.0.0.1", clientPort: 40001, serverAddr: "::ffff:127.0.0.1", serverPort: 5432}, true},
		{"IPv6", endsConn{local: tcp("::1", 40001), remote: tcp("::1", 5432)},
			look{clientAddr: "::1", clientPort: 40001, serverAddr: "::1", serverPort: 5432}, true},
		{"a proxy's connection: another client port", conn, func() look { l := same; l.clientPort = 40002; return l }(), false},
		{"a proxy on another host", conn, func() look { l := same; l.clientAddr = "10.0.0.7"; return l }(), false},
		{"address translation toward the server", conn, func() look { l := same; l.serverAddr = "10.0.0.9"; return l }(), false},
		{"a proxy on the server's host, other port", conn, func() look { l := same; l.serverPort = 6432; return l }(), false},
		{"a Unix socket whose listener cannot be asked", endsConn{local: &net.UnixAddr{Name: "", Net: "unix"},
			remote: &net.UnixAddr{Name: "/run/postgresql/.s.PGSQL.5432", Net: "unix"}}, look{}, false},
		{"a TCP client over a server-side Unix socket", conn, look{}, false},
		{"garbage from the server", conn, func() look { l := same; l.clientAddr = "not an address"; return l }(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.look.directPath(tc.conn))
		})
	}
}

// serverConn returns a ctx bounded for the test, the test server's DSN and a plain
// connection to it, closed when the test ends.
func serverConn(t *testing.T) (context.Context, string, *pgx.Conn) {
	t.Helper()
	dsn := os.Getenv(pgtest.EnvDSN)
	if dsn == "" {
		pgtest.Need(t, nil, errors.New("TestMain found no server"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	return ctx, dsn, admin
}

// lastQuery is the text of the statement a backend ran last, as pg_stat_activity shows it.
func lastQuery(t *testing.T, ctx context.Context, admin *pgx.Conn, pid uint32) string {
	t.Helper()
	var q string
	require.NoError(t, admin.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&q))
	return q
}

// heldBy returns the pids holding an exclusive advisory lock on key, from pg_locks.
func heldBy(t *testing.T, ctx context.Context, admin *pgx.Conn, key Key) []uint32 {
	t.Helper()
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted "+
		"AND classid = $1 AND objid = $2 AND objsubid = 1", int64(uint32(uint64(key)>>32)), int64(uint32(key)))
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	require.NoError(t, err)
	return pids
}

// TestDirectConnectionsRunTheRawStatements checks, on the server, which statements a
// lock cycle ran: on a connection straight to the server (loopback TCP, the server's Unix
// socket), the lock functions alone; through a TCP proxy or a Unix-socket proxy (both
// pass BackendKeyData through, so the pid check alone would be fooled), the statements
// that check the ownership token. Either way pg_locks shows the lock held, then free.
func TestDirectConnectionsRunTheRawStatements(t *testing.T) {
	ctx, dsn, admin := serverConn(t)
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skip("the test server is reached over a Unix socket: there is no direct TCP path to check")
	}

	var sockDir string
	require.NoError(t, admin.QueryRow(ctx, "SELECT split_part(current_setting('unix_socket_directories'), ',', 1)").Scan(&sockDir))
	paths := []struct {
		name   string
		dsn    string
		direct bool
	}{
		{"loopback TCP", dsn, true},
		{"through a TCP proxy", pgtest.WithPairs(dsn, "host=127.0.0.1", "port="+strconv.Itoa(startForwarder(t, cfg))), false},
	}
	if st, err := os.Stat(strings.TrimSpace(sockDir)); err == nil && st.IsDir() {
		sock := filepath.Join(strings.TrimSpace(sockDir), ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
		paths = append(paths, []struct {
			name   string
			dsn    string
			direct bool
		}{
			{"Unix socket", pgtest.WithPairs(dsn, "host="+strings.TrimSpace(sockDir)), runtime.GOOS == "linux"},
			{"through a Unix-socket proxy", pgtest.WithPairs(dsn, "host="+startUnixForwarder(t, sock, int(cfg.Port))), false},
		}...)
	} else if pgtest.InCI() {
		t.Fatalf("CI: the test server's Unix socket directory %q is not reachable here", sockDir)
	}
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			// No heartbeat (behind a TCP proxy it is on by default): the lock statements
			// read below are the unsliced ones, and no beat runs after them.
			m, err := New(ctx, p.dsn, WithHeartbeat(0))
			require.NoError(t, err)
			defer m.Close()
			name := t.Name()
			for _, try := range []bool{false, true} {
				var l *Lock
				if try {
					l, err = m.TryLock(ctx, name)
				} else {
					l, err = m.Lock(ctx, name)
				}
				require.NoError(t, err)
				assert.Equal(t, p.direct, l.s.st.direct)
				assert.Equal(t, []uint32{l.PID()}, heldBy(t, ctx, admin, KeyOf(name)))
				q := lastQuery(t, ctx, admin, l.PID())
				want := "pg_advisory_lock($1) IS NOT NULL"
				if try {
					want = "pg_try_advisory_lock($1)"
				}
				if p.direct {
					// A free lock was tried by the key's prepared statement, with the name's
					// comment after it in the same round trip (pin_named.go).
					want = nameComment(name)
					require.Equal(t, want, q)
				}
				require.Contains(t, q, want)
				if p.direct {
					assert.NotContains(t, q, ownerSetting, "a direct connection's lock statement checks the token")
				} else {
					assert.Contains(t, q, ownedBy, "a lock statement of a connection that may be proxied skips the token check")
				}
				require.NoError(t, l.Unlock(ctx))
				assert.Empty(t, heldBy(t, ctx, admin, KeyOf(name)))
				assert.Equal(t, !p.direct, strings.Contains(lastQuery(t, ctx, admin, l.PID()), ownedBy))
			}
		})
	}
}

// startUnixForwarder listens on a Unix socket named as PostgreSQL names its own
// (DIR/.s.PGSQL.PORT) in a new directory, relays each connection to the server's socket
// at target over a connection of its own, and returns the directory.
func startUnixForwarder(t *testing.T, target string, port int) string {
	dir, err := os.MkdirTemp("", "fwd")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, ".s.PGSQL."+strconv.Itoa(port)))
	require.NoError(t, err)
	relay(t, ln, "unix", target)
	return dir
}

// startForwarder starts a TCP proxy on loopback that relays each client connection to the
// server over a connection of its own (one for one, as a TCP load balancer does), and
// returns its port.
func startForwarder(t *testing.T, cfg *pgx.ConnConfig) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	relay(t, ln, "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	return ln.Addr().(*net.TCPAddr).Port
}

// relay accepts connections on ln until the test ends, and copies each, both ways, to a
// connection of its own to upstream.
func relay(t *testing.T, ln net.Listener, network, upstream string) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial(network, upstream)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// A key written into a statement's text locks the same pg_locks row as the key passed
// as a parameter, at both ends of the range and around zero.
func TestKeyLiteralLocksTheKey(t *testing.T) {
	ctx, dsn, admin := serverConn(t)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for _, k := range []Key{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64} {
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock("+keyLiteral(k)+")").Scan(&ok), "key %d", k)
		require.True(t, ok)
		var pid uint32
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		assert.Equal(t, []uint32{pid}, heldBy(t, ctx, admin, k), "key %d", k)
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(k)).Scan(&ok))
		require.True(t, ok, "key %d: the parameter form did not release what the literal took", k)
	}
}
