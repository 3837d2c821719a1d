package faults_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
	"github.com/pgadvisory/advisory/internal/sockfd"
)

// The holder's side of the connection, as the library sets it: keepalive 4 s / 2 s / 3
// and TCP_USER_TIMEOUT 10 s (told within ~10 s of a silent path).
var poolClientKeepalive = net.KeepAliveConfig{Enable: true, Idle: 4 * time.Second, Interval: 2 * time.Second, Count: 3}

const poolClientUserTimeout = 10 * time.Second

// The heartbeat: a SELECT 1 every heartbeatEvery, each under heartbeatDeadline.
const (
	heartbeatEvery    = 500 * time.Millisecond
	heartbeatDeadline = 5 * time.Second
)

// poolHoldSQL is a transaction holding: one simple-protocol Query that opens the
// transaction, gives it the server-side settings the library would (no idle-in-
// transaction reaping; keepalive 10 s / 5 s / 4 and tcp_user_timeout 30 s, for this
// transaction only), and takes the key. The last statement reports the backend and the
// settings it runs with.
const poolHoldSQL = `BEGIN; SELECT set_config('idle_in_transaction_session_timeout', '0', true),
 set_config('tcp_keepalives_idle', '10', true), set_config('tcp_keepalives_interval', '5', true),
 set_config('tcp_keepalives_count', '4', true), set_config('tcp_user_timeout', '30000', true);
 SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_advisory_xact_lock(%d) IS NOT NULL,
 concat_ws('/', current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'),
 current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout'))`

// runPoolHolder is a holder behind a transaction pooler, with raw pgconn: it connects to
// ADVISORY_FAULT_DSN, holds ADVISORY_FAULT_KEY (an int64) in an open transaction, prints
// "LOCKED <backend pid> <local port> <keepalive idle/interval/count/user timeout>", then
// watches the connection as ADVISORY_FAULT_WATCH says (idle: a reader blocked on the
// socket; heartbeat: a SELECT 1 every 500 ms under a 5 s deadline) and prints "TOLD
// <error>" the moment the watch fails. It then waits to be killed. It never sends a cancel
// request (see pgtest.NoCancel).
func runPoolHolder() int {
	if os.Getenv("ADVISORY_FAULT_WATCH") == "library" {
		return runLibraryPoolHolder()
	}
	conn, err := connectPoolHolder()
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	key, err := strconv.ParseInt(os.Getenv("ADVISORY_FAULT_KEY"), 10, 64)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	res, err := conn.Exec(context.Background(), fmt.Sprintf(poolHoldSQL, key)).ReadAll()
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	row := res[len(res)-1].Rows[0]
	fmt.Println("LOCKED", string(row[0]), conn.Conn().LocalAddr().(*net.TCPAddr).Port, string(row[2]))
	if os.Getenv("ADVISORY_FAULT_WATCH") == "heartbeat" {
		err = heartbeat(conn)
	} else {
		err = watchIdle(conn)
	}
	fmt.Println("TOLD", err)
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// connectPoolHolder connects with the client keepalive and user timeout, sending no cancel
// request ever.
func connectPoolHolder() (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(os.Getenv("ADVISORY_FAULT_DSN"))
	if err != nil {
		return nil, err
	}
	d := &net.Dialer{KeepAliveConfig: poolClientKeepalive}
	cfg.DialFunc = pgtest.NoCancel(func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			err = sockfd.SetUserTimeout(c, poolClientUserTimeout)
		}
		return c, err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pgconn.ConnectConfig(ctx, cfg)
}

// watchIdle reads the idle connection until it fails: a notice or notification (none is
// expected) returns nil, and the wait goes on.
func watchIdle(conn *pgconn.PgConn) error {
	for {
		if err := conn.WaitForNotification(context.Background()); err != nil {
			return err
		}
	}
}

// heartbeat runs SELECT 1 every heartbeatEvery until one fails or outlives
// heartbeatDeadline.
func heartbeat(conn *pgconn.PgConn) error {
	for {
		time.Sleep(heartbeatEvery)
		ctx, cancel := context.WithTimeout(context.Background(), heartbeatDeadline)
		_, err := conn.Exec(ctx, "SELECT 1").ReadAll()
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("heartbeat deadline (%v): %w", heartbeatDeadline, err)
			}
			return err
		}
	}
}

// runLibraryPoolHolder is runPoolHolder with the library itself: a Manager on
// ADVISORY_FAULT_DSN (which finds the transaction pooler and holds by transaction, with
// its default heartbeat and keepalive) holds ADVISORY_FAULT_KEY, prints the same LOCKED
// line (the settings read in the holding's own transaction through BeginFunc, the port
// from the lock's socket), and "TOLD <error>" when Done closes.
func runLibraryPoolHolder() int {
	ctx := context.Background()
	fail := func(err error) int { fmt.Println("ERROR", err); return 1 }
	key, err := strconv.ParseInt(os.Getenv("ADVISORY_FAULT_KEY"), 10, 64)
	if err != nil {
		return fail(err)
	}
	m, err := advisory.New(ctx, os.Getenv("ADVISORY_FAULT_DSN"))
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	if m.Holding() != advisory.HoldingTransaction || !m.Bounds().TransactionPooler {
		return fail(fmt.Errorf("holding %v, transaction pooler %v", m.Holding(), m.Bounds().TransactionPooler))
	}
	l, err := m.LockKey(ctx, advisory.Key(key))
	if err != nil {
		return fail(err)
	}
	var settings string
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `SELECT concat_ws('/', current_setting('tcp_keepalives_idle'),
			current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'),
			current_setting('tcp_user_timeout'))`).Scan(&settings)
	})
	if err != nil {
		return fail(err)
	}
	port, err := lockPort(l)
	if err != nil {
		return fail(err)
	}
	fmt.Println("LOCKED", l.PID(), port, settings)
	<-l.Done()
	fmt.Println("TOLD", l.Err())
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// lockPort returns the local port of the lock's connection (a duplicate of its socket,
// closed at once).
func lockPort(l *advisory.Lock) (int, error) {
	f, err := l.File()
	if err != nil {
		return 0, err
	}
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.TCPAddr).Port, nil
}
