package faults_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// A chaos run through a pooler meets the pooler's own crash: PgBouncer 1.18 exits on a
// cancel request whose client closed its connection before PgBouncer forwarded it
// ("bad client state: 0", pgbouncer issue 801), which a SIGKILLed worker with a cancel
// in flight does. The library itself never abandons a cancel (internal/cancelreq), but
// the run kills processes. A pooler that dies is chaos users meet, and their supervisor
// (systemd's Restart=on-failure) starts it again: so does the run, on the same port,
// counting each restart and logging the crash's own lines. Connection errors the
// workers meet are then allowed ("UNREACHABLE"); with no restart they fail the run as
// before. Overlaps fail it in every case.

// TestChaosThroughACrashingPooler is TestChaosThroughAPooler whose PgBouncer dies once
// (SIGKILL, as its crash looks from outside) 3 s into the run: the run restarts it, goes
// on, and still finds no overlap. It used to fail with every worker's "connection
// refused" for the rest of the run.
func TestChaosThroughACrashingPooler(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(14))
	pid := b.PID()
	crash := time.AfterFunc(3*time.Second, func() { syscall.Kill(pid, syscall.SIGKILL) })
	defer crash.Stop()
	require.Positive(t, chaos(t, b.DSN(), 10, b), "the pooler was restarted")
}

// bouncerSupervisor restarts a PgBouncer whenever it exits, until end.
type bouncerSupervisor struct {
	b        *pgtest.PgBouncer
	stop     chan struct{}
	done     chan struct{}
	restarts int
	err      error // a restart that failed (the supervisor then stops)
}

// superviseBouncer starts supervising b; nil for none (a run without a pooler).
func superviseBouncer(b *pgtest.PgBouncer) *bouncerSupervisor {
	if b == nil {
		return nil
	}
	s := &bouncerSupervisor{b: b, stop: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *bouncerSupervisor) loop() {
	defer close(s.done)
	for {
		select {
		case <-s.stop:
			return
		case <-s.b.Exited():
		}
		s.restarts++
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := s.b.Start(ctx)
		cancel()
		if err != nil {
			s.err = err
			return
		}
	}
}

// end stops supervising and reports: each crash's lines from PgBouncer's log, and a
// failure if a restart failed. It returns how many times PgBouncer was restarted.
func (s *bouncerSupervisor) end(t *testing.T) int {
	t.Helper()
	if s == nil {
		return 0
	}
	close(s.stop)
	<-s.done
	if s.restarts > 0 {
		var crash []string
		for _, l := range s.b.LogLines() {
			if strings.Contains(l.Text, "FATAL") || strings.Contains(l.Text, "bad client state") {
				crash = append(crash, l.At.Format(time.RFC3339Nano)+" "+l.Text)
			}
		}
		t.Logf("the pooler exited %d time(s) and was restarted on its port each time; its log's FATAL lines "+
			"(none for a SIGKILL):\n%s", s.restarts, strings.Join(crash, "\n"))
	}
	require.NoError(t, s.err, "restarting the pooler after it exited; its log:\n%s", s.b.Log())
	return s.restarts
}

// unreachable reports whether err is a connection failure: refused, reset, cut off, or
// a connection found closed before anything was sent on it ("conn closed").
func unreachable(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &ne) ||
		errors.As(err, &ce) || pgconn.SafeToRetry(err)
}

// newUntil is advisory.New, tried again while the server is unreachable (a pooler being
// restarted) until until.
func newUntil(ctx context.Context, until time.Time, dsn string, opts ...advisory.Option) (*advisory.Manager, error) {
	for {
		m, err := advisory.New(ctx, dsn, opts...)
		if err == nil || !unreachable(err) || time.Now().After(until) {
			return m, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
