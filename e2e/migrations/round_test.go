package migrations_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A round: a fresh database, four workers started at once, each taking the lock
// roundLock and running migrations 1 to 4 under it; the worker that holds the lock is
// SIGKILLed while migration 3 (one slow DDL transaction) runs.
const (
	roundLock    = "e2e/migrations"
	roundWorkers = 4
	rounds       = 3
	lastVersion  = 4
)

// A scenario is one tool and one way of holding the lock.
type scenario struct {
	name string // also part of the round databases' names
	// command is worker w's process, not started; its environment is set by the round.
	command func(tl *tools, w int, url string) *exec.Cmd
	// version reads the version the tool recorded, and its dirty flag.
	version func(ctx context.Context, conn *pgx.Conn) (version int64, dirty bool, err error)
}

func runRounds(t *testing.T, sc scenario) {
	for r := 1; r <= rounds; r++ {
		t.Run(fmt.Sprintf("round%d", r), func(t *testing.T) { runRound(t, sc, r) })
	}
}

func runRound(t *testing.T, sc scenario, round int) {
	tl := needTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := fmt.Sprintf("e2e_%s_r%d", sc.name, round)
	url := freshDB(t, db)
	conn := connect(t, ctx, url)
	_, err := conn.Exec(ctx, workLogSQL)
	require.NoError(t, err)

	obs := startObserver(t, db, roundLock)
	ws := startWorkers(t, tl, sc, url)
	victim := killSlowHolder(t, obs, ws)
	waitWorkers(t, ws, 2*time.Minute)
	tln := newTimeline(obs.result(t))
	rows := readWorkLog(t, ctx, conn)
	next := tln.nextHolder(victim)
	tln.log(t, victim, next, rows, ws[next].out.String())
	checkRound(t, ctx, sc, conn, ws, victim, next, tln, rows)
}

// workLogSQL sets up a round's database: each migration calls work_begin first and
// work_end last, so a committed migration leaves one work_log row with its session, its
// start and end by the server's clock, and the other workers' sessions that were still
// there when it began (none, if the work is fenced).
const workLogSQL = `
CREATE TABLE work_log (
  version int NOT NULL,
  app text NOT NULL,
  pid int NOT NULL,
  started timestamptz NOT NULL,
  finished timestamptz,
  others text[] NOT NULL
);
CREATE FUNCTION work_begin(v int) RETURNS void LANGUAGE sql AS $$
  INSERT INTO work_log (version, app, pid, started, others)
  SELECT v, current_setting('application_name'), pg_backend_pid(), clock_timestamp(),
    coalesce(array_agg(a.application_name ORDER BY a.pid), '{}')
  FROM pg_stat_activity a
  WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
    AND a.application_name ~ 'e2e\.w[0-9]+$'
    AND substring(a.application_name from 'e2e\.w[0-9]+$')
      IS DISTINCT FROM substring(current_setting('application_name') from 'e2e\.w[0-9]+$')
$$;
CREATE FUNCTION work_end(v int) RETURNS void LANGUAGE sql AS $$
  UPDATE work_log SET finished = clock_timestamp()
  WHERE version = v AND pid = pg_backend_pid() AND finished IS NULL
$$;`

// A worker is one process of a round.
type worker struct {
	n    int
	cmd  *exec.Cmd
	out  syncBuffer
	done chan struct{}
}

func startWorkers(t *testing.T, tl *tools, sc scenario, url string) []*worker {
	t.Helper()
	ws := make([]*worker, roundWorkers)
	for i := range ws {
		w := &worker{n: i, cmd: sc.command(tl, i, url), done: make(chan struct{})}
		w.cmd.Env = append(append(os.Environ(), w.cmd.Env...), "DATABASE_URL="+url, fmt.Sprintf("PGAPPNAME=e2e.w%d", i),
			"PATH="+toolDir+string(filepath.ListSeparator)+os.Getenv("PATH"))
		w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
		require.NoError(t, w.cmd.Start())
		go func() { w.cmd.Wait(); close(w.done) }()
		t.Cleanup(func() {
			w.cmd.Process.Kill()
			<-w.done
		})
		ws[i] = w
	}
	return ws
}

// killSlowHolder waits until a work session sleeps in migration 3 and SIGKILLs the
// worker whose session holds the lock, which must be that session's worker. It returns
// the worker's number.
func killSlowHolder(t *testing.T, obs *observer, ws []*worker) int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		s, ok := obs.last()
		if ok && s.holder >= 0 {
			for _, w := range s.work {
				if w.waitEvent == "PgSleep" {
					require.Equal(t, s.holder, w.worker, "the slow migration runs for the lock's holder")
					require.NoError(t, ws[s.holder].cmd.Process.Signal(syscall.SIGKILL))
					return s.holder
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no worker ran the slow migration within a minute")
	return -1
}

func waitWorkers(t *testing.T, ws []*worker, limit time.Duration) {
	t.Helper()
	timeout := time.After(limit)
	for _, w := range ws {
		select {
		case <-w.done:
		case <-timeout:
			for _, w := range ws {
				t.Logf("worker %d:\n%s", w.n, w.out.String())
			}
			t.Fatalf("the workers did not end within %v", limit)
		}
	}
}

// A workRow is a work_log row: one committed migration.
type workRow struct {
	version           int
	app               string
	pid               uint32
	started, finished time.Time
	others            []string
}

func readWorkLog(t *testing.T, ctx context.Context, conn *pgx.Conn) []workRow {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT version, app, pid, started, finished, others FROM work_log ORDER BY started")
	require.NoError(t, err)
	var out []workRow
	var r workRow
	var pid int32
	_, err = pgx.ForEachRow(rows, []any{&r.version, &r.app, &pid, &r.started, &r.finished, &r.others}, func() error {
		r.pid = uint32(pid)
		out = append(out, r)
		return nil
	})
	require.NoError(t, err)
	return out
}

// syncBuffer is a bytes.Buffer for a process's output that the test may read while the
// process writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
