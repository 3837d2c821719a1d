package advisory_test

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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgBouncerSessionPooling: behind a real PgBouncer in session mode locks work as on a
// direct connection (holders and waiters seen in pg_locks, ErrLocked, hand-over, Sessions),
// a SIGKILLed holder process's lock is freed within 2 s (PgBouncer's DISCARD ALL), and
// nothing is left or leaked afterwards. Quiet and with busy background clients (in
// parallel with each other, not with the package's other tests).
func TestPgBouncerSessionPooling(t *testing.T) {
	for _, load := range poolerLoads {
		t.Run(load.name, func(t *testing.T) {
			t.Parallel()
			pgtest.Need(t, srv, startErr)
			b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
			busyClients(t, b.DSN(), load.busy)
			t.Run("locks work", func(t *testing.T) { sessionPoolingLocksWork(t, b) })
			t.Run("shared sessions", func(t *testing.T) { sessionPoolingShared(t, b) })
			t.Run("SIGKILLed holder freed within 2s", func(t *testing.T) { sessionPoolingKilledHolder(t, b) })
			t.Run("fenced transactions", func(t *testing.T) { sessionPoolingFenced(t, b) })
			t.Run("work tagged and drained", func(t *testing.T) { sessionPoolingWorkDrained(t, b) })
			t.Run("leaders observed by notification", func(t *testing.T) { sessionPoolingLeaders(t, b) })
			t.Run("no lock left on a server connection", func(t *testing.T) { requireNoLockLeft(t, b) })
			t.Run("no session setting leaks", func(t *testing.T) { requireNoSettingLeaked(t, b, nil) })
		})
	}
}

// sessionPoolingShared: behind the pooler holdings share sessions (WithSharedSessions)
// with the checked statements: a Lock and an Unlock one at a time (each a batch of one
// request, the plain statement of its mode with the token) and a burst at once (batches
// of several), each lock held by its session's backend in pg_locks and free after its
// Unlock, the session resting in between.
func sessionPoolingShared(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	name := t.Name()
	m, err := advisory.New(ctx, b.DSN(), advisory.WithSharedSessions(100), advisory.WithHostLingerForTest(time.Hour))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	var pid uint32
	for i := range 3 {
		l, err := m.Lock(ctx, fmt.Sprintf("%s/one/%d", name, i))
		require.NoError(t, err)
		require.True(t, l.SharesSession())
		if i == 0 {
			pid = l.PID()
		}
		require.Equal(t, pid, l.PID(), "one after another on the resting session")
		requireHeldBy(t, l.Key(), pid)
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, l.Key())
	}
	require.True(t, m.Bounds().Proxied, "behind the pooler: the checked statements")
	burst := holdNames(t, m, name+"/burst", 40)
	for _, l := range burst {
		requireHeldBy(t, l.Key(), l.PID())
	}
	for _, l := range burst {
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, l.Key())
	}
}

// sessionPoolingLeaders: behind the pooler a leader publishes its value and an observer,
// whose re-check is an hour away, hears its election and its step-down (LISTEN and NOTIFY
// work in session mode).
func sessionPoolingLeaders(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	name := t.Name()
	newM := func(opts ...advisory.Option) *advisory.Manager {
		m, err := advisory.New(ctx, b.DSN(), append(opts, advisory.WithLeaderTable())...)
		require.NoError(t, err)
		t.Cleanup(m.Close)
		return m
	}
	leader, follower := newM(), newM(advisory.WithLeaderRecheck(time.Hour))
	require.NoError(t, leader.CreateLeaderTable(ctx))
	ch, err := follower.Observe(ctx, name)
	require.NoError(t, err)
	awaitLeader(t, ch, 10*time.Second, "nobody", func(l advisory.Leader) bool { return !l.Elected })
	stop := make(chan struct{})
	done := leadUntil(ctx, leader, name, "behind-pgbouncer", stop)
	ld, _ := awaitLeader(t, ch, 10*time.Second, "the leader", func(l advisory.Leader) bool { return l.Value == "behind-pgbouncer" })
	requireHeldBy(t, advisory.KeyOf(name), ld.Holder.PID)
	close(stop)
	require.NoError(t, <-done)
	awaitLeader(t, ch, 10*time.Second, "the step-down", func(l advisory.Leader) bool { return !l.Elected })
}

func sessionPoolingLocksWork(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	var ms [2]*advisory.Manager
	for i := range ms {
		var opts []advisory.Option
		if i == 0 { // its lock statement is read below: no heartbeat to run after it, no slices
			opts = append(opts, advisory.WithHeartbeat(0))
		}
		m, err := advisory.New(ctx, b.DSN(), opts...)
		require.NoError(t, err)
		t.Cleanup(m.Close)
		ms[i] = m
	}
	l, err := ms[0].Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, l.PID())
	// Behind the pooler no connection is direct: the lock statement checked the token.
	var q string
	require.NoError(t, admin.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(l.PID())).Scan(&q))
	require.Contains(t, q, "pg_catalog.current_setting('advisory.owner', true) OPERATOR(pg_catalog.=) $2")
	_, err = ms[1].TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)

	got := make(chan *advisory.Lock, 1)
	go func() {
		l2, err := ms[1].Lock(ctx, name)
		assert.NoError(t, err)
		got <- l2
	}()
	waitForWaiters(t, key, 1)
	require.NoError(t, l.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	requireHeldBy(t, key, l2.PID())
	require.NoError(t, l2.Unlock(ctx))
	requireFree(t, key)

	S, err := ms[0].Session(ctx)
	require.NoError(t, err)
	names := []string{name + "/a", name + "/b", name + "/c"}
	require.NoError(t, S.LockAll(ctx, names))
	for _, n := range names {
		requireHeldBy(t, advisory.KeyOf(n), S.PID())
	}
	require.NoError(t, S.Close(ctx))
	for _, n := range names {
		requireFree(t, advisory.KeyOf(n))
	}
	for _, m := range ms {
		requireNoAcquired(t, m)
	}
}

func sessionPoolingKilledHolder(t *testing.T, b *pgtest.PgBouncer) {
	name := t.Name()
	key := advisory.KeyOf(name)
	holder, pid := startPoolerHolder(t, b.DSN(), name)
	requireHeldBy(t, key, pid)
	start := time.Now()
	require.NoError(t, syscall.Kill(holder.Process.Pid, syscall.SIGKILL))
	if !within(2*time.Second, 5*time.Millisecond, func() bool { return len(lockRows(t, key)) == 0 }) {
		t.Fatalf("the killed holder's lock is still held 2s later: %v", lockRows(t, key))
	}
	t.Logf("freed %v after SIGKILL", time.Since(start))
}

// Environment of the holder process (TestPgBouncerHolderProcess).
const (
	holderDSNEnv  = "ADVISORY_POOLER_HOLDER_DSN"
	holderNameEnv = "ADVISORY_POOLER_HOLDER_NAME"
)

// startPoolerHolder runs this test binary as a holder process of name through dsn and
// returns it with the backend pid of its lock once it holds it. The process is killed
// when the test ends.
func startPoolerHolder(t *testing.T, dsn, name string) (*exec.Cmd, uint32) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestPgBouncerHolderProcess$")
	cmd.Env = append(os.Environ(), holderDSNEnv+"="+dsn, holderNameEnv+"="+name)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "LOCKED ") || strings.HasPrefix(sc.Text(), "ERROR ") {
				lines <- sc.Text()
				return
			}
		}
		lines <- "ERROR exited"
	}()
	select {
	case line := <-lines:
		pid, err := strconv.ParseUint(strings.TrimPrefix(line, "LOCKED "), 10, 32)
		require.NoError(t, err, "holder process: %s", line)
		return cmd, uint32(pid)
	case <-time.After(30 * time.Second):
		t.Fatal("the holder process did not take the lock within 30s")
	}
	return nil, 0
}

// TestPgBouncerHolderProcess is not a test: it is the holder process of
// sessionPoolingKilledHolder (run with the environment set). It takes the lock, prints
// "LOCKED <pid>" and holds it until it is killed or its stdin closes.
func TestPgBouncerHolderProcess(t *testing.T) {
	dsn := os.Getenv(holderDSNEnv)
	if dsn == "" {
		return
	}
	ctx := context.Background()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	l, err := m.Lock(ctx, os.Getenv(holderNameEnv))
	if err != nil {
		fmt.Println("ERROR", err)
		return
	}
	fmt.Println("LOCKED", l.PID())
	bufio.NewReader(os.Stdin).ReadString('\n')
	os.Exit(0) // no cleanup: the process is meant to die holding the lock
}

// sessionPoolingFenced: behind session pooling a fenced transaction commits on the
// holding backend, and one whose backend is terminated during fn commits nothing, with
// the loss seen while fn runs (PgBouncer closes the client when its server goes).
func sessionPoolingFenced(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	table := fenceTable(t)
	m, err := advisory.New(ctx, b.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		require.Equal(t, l.PID(), pid, "fn runs on the holding backend")
		return insert(ctx, tx, table, "committed")
	}))
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "stale"))
		terminate(t, l.PID())
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("loss during fn not seen behind PgBouncer")
		}
		return nil
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.Equal(t, []string{"committed"}, rowsIn(t, table))
	requireNoAcquired(t, m)
}

// sessionPoolingWorkDrained: behind PgBouncer the work's connections get the tag (which
// PgBouncer passes on as application_name) but no options (PgBouncer refuses an options
// startup parameter), and the next holder drains an earlier holder's work through the
// pooler.
func sessionPoolingWorkDrained(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	first, err := advisory.New(ctx, b.DSN())
	require.NoError(t, err)
	t.Cleanup(first.Close)
	second, err := advisory.New(ctx, b.DSN(), advisory.WithDrainWait(0))
	require.NoError(t, err)
	t.Cleanup(second.Close)
	l, err := first.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.Empty(t, l.WorkOptions(), "behind a proxy the work gets no options")
	pid, done := slowWork(t, workConn(t, l, b.DSN()), t.Name())
	var app string
	require.NoError(t, admin.QueryRow(ctx, "SELECT application_name FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&app))
	require.Equal(t, l.WorkAppName(""), app)
	terminate(t, l.PID())
	<-l.Done()
	ran := false
	require.NoError(t, second.Do(ctx, t.Name(), func(ctx context.Context) error {
		ran = true
		require.True(t, backendGone(t, pid), "the earlier holder's work backend runs while fn does")
		return nil
	}))
	require.True(t, ran)
	require.Error(t, <-done)
	require.False(t, markerCommitted(t, t.Name()))
}
