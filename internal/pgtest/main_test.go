package pgtest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// roleEnv makes the test binary a helper process (see runHolder) instead of a test run.
const roleEnv = "PGTEST_ROLE"

var (
	srv      *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "holder" {
		os.Exit(runHolder())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return pgtest.Suite{Srv: &srv, Err: &startErr}.Run(m)
}

// server returns the package's server; without one the test skips (fails under CI).
func server(t testing.TB) *pgtest.Server {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return srv
}

// connect opens a plain pgx connection, closed when the test ends. Through a
// transaction-mode PgBouncer a client must not rely on prepared statements surviving
// between transactions, so it uses the simple protocol.
func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.WithParams(dsn, map[string]string{"default_query_exec_mode": "simple_protocol"}))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// runHolder is the helper process: it connects to PGTEST_DSN, takes the advisory lock
// PGTEST_KEY, prints "LOCKED <backend pid>" and waits to be killed (or for stdin to close).
func runHolder() int {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("PGTEST_DSN"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	key, _ := strconv.ParseInt(os.Getenv("PGTEST_KEY"), 10, 64)
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid() FROM (SELECT pg_advisory_lock($1)) l", key).Scan(&pid); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("LOCKED", pid)
	bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

// startHolder runs the helper process against dsn and returns it once it holds key.
// It is killed when the test ends.
func startHolder(t testing.TB, dsn string, key int64) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"=holder", "PGTEST_DSN="+dsn, fmt.Sprintf("PGTEST_KEY=%d", key))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case l := <-line:
		require.True(t, strings.HasPrefix(l, "LOCKED "), "helper said %q", l)
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not take the lock within 30s")
	}
	return cmd
}
