package main_test

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// lateServer is the harness's server behind a loopback port that starts answering late:
// until up is called nothing listens on the port (connection refused); then the first
// refusals connections are answered with FATAL code (as PostgreSQL answers while it
// starts: 57P03) and the rest are passed on to the real server.
type lateServer struct {
	t        *testing.T
	port     int
	code     string
	msg      string
	refusals int32
	accepted atomic.Int32
}

func newLateServer(t *testing.T, code, msg string, refusals int) *lateServer {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return &lateServer{t: t, port: port, code: code, msg: msg, refusals: int32(refusals)}
}

// dsn is the harness's DSN pointed at the late port, with the given extra settings.
func (s *lateServer) dsn(extra ...string) string {
	return pgtest.WithPairs(srv.DSN(), append([]string{"host=127.0.0.1", "port=" + strconv.Itoa(s.port),
		"sslmode=disable"}, extra...)...)
}

// up starts listening.
func (s *lateServer) up() {
	s.t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
	require.NoError(s.t, err)
	s.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if s.accepted.Add(1) <= s.refusals {
				go s.refuse(c)
			} else {
				go s.pass(c)
			}
		}
	}()
}

// refuse reads the startup message and answers with the FATAL error.
func (s *lateServer) refuse(c net.Conn) {
	defer c.Close()
	var hdr [8]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint32(hdr[:4]))-8); err != nil {
		return
	}
	b, _ := (&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: s.code,
		Message: s.msg}).Encode(nil)
	c.Write(b)
}

// pass relays c to the real server.
func (s *lateServer) pass(c net.Conn) {
	cfg, err := pgconn.ParseConfig(srv.DSN())
	if err != nil {
		c.Close()
		return
	}
	up, err := net.Dial("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		c.Close()
		return
	}
	go func() { io.Copy(up, c); up.Close() }()
	io.Copy(c, up)
	c.Close()
}

// TestConnectRetriesAServerThatIsNotUpYet (issue 23, item 8): run, status and break retry
// a server that refuses connections, then answers "the database system is starting up"
// (57P03), and go on once it takes them. Each reason is reported once, not at every
// attempt, and so is the connect that succeeded. run used to exit 69 after 8 ms: an init
// container started beside its database crash-looped.
func TestConnectRetriesAServerThatIsNotUpYet(t *testing.T) {
	t.Parallel()
	// Each case locks a name of its own: the cases run at once, and status must not see
	// a run case's lock.
	const name = "\x00"
	for _, args := range [][]string{
		{"run", "--connect-timeout", "30s", "--name", name, "--", "echo", "ran"},
		{"run", "--name", name, "--", "echo", "ran"}, // run's default is 30s
		{"status", "--connect-timeout", "30s", "--name", name},
		{"break", "--connect-timeout", "30s", "--name", name, "--yes"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			t.Parallel()
			args := append([]string(nil), args...)
			for i, a := range args {
				if a == name {
					args[i] = t.Name()
				}
			}
			lateServerCase(t, args)
		})
	}
}

func lateServerCase(t *testing.T, args []string) {
	s := newLateServer(t, "57P03", "the database system is starting up", 2)
	p := startEnv(t, []string{"DATABASE_URL=" + s.dsn()}, args...)
	p.stderr.waitFor(t, "connection refused; retrying for up to 30s (--connect-timeout)", 10*time.Second)
	time.Sleep(300 * time.Millisecond) // a few more refused attempts
	s.up()
	r := wait(t, p)
	t.Logf("%q: %s", args, r.stderr)
	switch args[0] {
	case "run":
		assert.Equal(t, 0, r.code, "%q: %s", args, r.stderr)
		assert.Equal(t, "ran\n", r.stdout)
	case "status":
		assert.Equal(t, 0, r.code, "%q: %s", args, r.stderr)
		assert.Contains(t, r.stdout, "no advisory lock with key")
	case "break": // it got as far as reading the holders
		assert.Equal(t, 3, r.code, "%q: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "nothing to break")
	}
	assert.Equal(t, 1, strings.Count(r.stderr, "connection refused"), "%q: one line per reason", args)
	assert.Equal(t, 1, strings.Count(r.stderr, "(SQLSTATE 57P03)"), "%q: one line per reason", args)
	assert.Contains(t, r.stderr, `the server says "the database system is starting up"`, "%q", args)
	assert.Contains(t, r.stderr, "pgadvisory: connected to 127.0.0.1:", "%q", args)
	assert.GreaterOrEqual(t, s.accepted.Load(), int32(3), "%q", args)
}

// TestConnectDoesNotRetryWhatTimeWillNotFix: a wrong password (28P01), a role or
// database that does not exist: run exits 69 at once, whatever --connect-timeout says,
// with the server's reason and without the password.
func TestConnectDoesNotRetryWhatTimeWillNotFix(t *testing.T) {
	t.Parallel()
	s := newLateServer(t, "28P01", `password authentication failed for user "postgres"`, 1000)
	s.up()
	for _, tc := range []struct {
		dsn, want string
	}{
		{s.dsn("password=s3cret"), "password authentication failed"},
		{pgtest.WithPairs(dsn(t), "dbname=nosuchdb_"+strings.ToLower(t.Name()), "password=s3cret"), "does not exist"},
	} {
		r := wait(t, startEnv(t, []string{"DATABASE_URL=" + tc.dsn},
			"run", "--connect-timeout", "30s", "--name", t.Name(), "--", "echo", "ran"))
		assert.Equal(t, 69, r.code, r.stderr)
		assert.Less(t, r.took, 10*time.Second, "no retries: %s", r.stderr)
		assert.Contains(t, r.stderr, "cannot connect to")
		assert.Contains(t, r.stderr, tc.want)
		assert.NotContains(t, r.stderr, "retrying")
		assert.NotContains(t, r.stderr+r.stdout, "s3cret", "the password is never printed")
		assert.Empty(t, r.stdout, "the command never ran")
	}
	assert.Equal(t, int32(1), s.accepted.Load(), "one attempt")
}

// TestConnectRetriesEndOnASignalOrTheTimeout: SIGTERM during the retries ends run at once
// with 143, and without one run gives up when --connect-timeout ends, with 69 and the
// last reason, the password masked even where the server's message repeats it.
func TestConnectRetriesEndOnASignalOrTheTimeout(t *testing.T) {
	t.Parallel()
	s := newLateServer(t, "", "", 0)
	p := startEnv(t, []string{"DATABASE_URL=" + s.dsn("password=s3cret")}, "run", "--name", t.Name(), "--", "echo", "ran")
	p.stderr.waitFor(t, "retrying", 10*time.Second)
	sent := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := wait(t, p)
	assert.Equal(t, 143, r.code, r.stderr)
	assert.Less(t, time.Since(sent), 2*time.Second)
	assert.Contains(t, r.stderr, "interrupted by SIGTERM while connecting; the command was not started")

	// A server that never finishes starting, and repeats the password in its message.
	s = newLateServer(t, "57P03", "the database system is starting up (s3cret)", 1000)
	s.up()
	p = startEnv(t, []string{"DATABASE_URL=" + s.dsn("password=s3cret")},
		"run", "--connect-timeout", "1500ms", "--name", t.Name(), "--", "echo", "ran")
	r = wait(t, p)
	exited := time.Now()
	assert.Equal(t, 69, r.code, r.stderr)
	// The window runs from the first attempt: run cannot give up sooner than 1.5 s after it
	// started. It gives up once the window is over and its last attempt failed: from its
	// first line (said after the first attempt failed) to its exit, at most the window and
	// the last attempt's own bound (1 s, see attemptTimeout). Not from the process's start,
	// which a busy machine delays by a varying amount (CI once measured 2.63 s so).
	assert.GreaterOrEqual(t, r.took, 1500*time.Millisecond, r.stderr)
	assert.LessOrEqual(t, exited.Sub(p.stderr.firstWrite()), 2500*time.Millisecond, r.stderr)
	assert.GreaterOrEqual(t, s.accepted.Load(), int32(2), "it tried again")
	assert.Equal(t, 1, strings.Count(r.stderr, "retrying for up to 1.5s"), r.stderr)
	assert.Contains(t, r.stderr, "(still failing after 1.5s of retries, --connect-timeout)")
	assert.NotContains(t, r.stderr+r.stdout, "s3cret", "the password is never printed")
	assert.Empty(t, r.stdout)
}

// TestConnectTimeoutUsage: a negative --connect-timeout is a usage error.
func TestConnectTimeoutUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--connect-timeout", "-1s", "--name", "k", "--", "true"},
		{"status", "--connect-timeout", "-1s"},
		{"break", "--connect-timeout", "-1s", "--name", "k"},
		{"init-fencing", "--connect-timeout", "-1s"},
	} {
		r := noDB(t, args...)
		assert.Equal(t, 64, r.code, "%q: %s", args, r.stderr)
		assert.Contains(t, r.stderr, fmt.Sprintf("%s: --connect-timeout -1s: want 0", args[0]), "%q", args)
	}
}
