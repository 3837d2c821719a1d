package advisory_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestBeginFuncOnAHungServerEndsWithItsCtx: the backend holding the lock is frozen
// (SIGSTOP: the kernel still answers keepalives, as a proxy in front of a frozen primary
// does). BeginFunc returns within its ctx plus the cancel grace, whether the server hangs
// before fn's transaction begins or while fn runs, the holder is told the lock is lost,
// and fn's writes never commit when the server comes back (issue 44, item 2: BEGIN waited
// until the backend was continued).
func TestBeginFuncOnAHungServerEndsWithItsCtx(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("freezing a backend (SIGSTOP) needs root")
	}
	t.Parallel()
	const wait, grace = time.Second, 500 * time.Millisecond
	kinds := map[string]*advisory.Manager{
		"session":     newManager(t, nil, advisory.WithCancelGrace(grace)),
		"transaction": txManager(t, advisory.WithCancelGrace(grace)),
	}
	for kind, m := range kinds {
		for _, stage := range []string{"before BEGIN", "while fn runs"} {
			t.Run(kind+"/"+stage, func(t *testing.T) {
				ctx := ctxT(t)
				table := fenceTable(t)
				l, err := m.Lock(ctx, t.Name())
				require.NoError(t, err)
				pid := int(l.PID())
				thaw := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
				t.Cleanup(thaw)
				if stage == "before BEGIN" {
					require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
				}
				cctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				start := time.Now()
				returned := make(chan error, 1)
				go func() {
					returned <- l.BeginFunc(cctx, func(tx pgx.Tx) error {
						if err := insert(cctx, tx, table, "never"); err != nil {
							return err
						}
						if stage == "while fn runs" {
							require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
						}
						_, err := tx.Exec(cctx, "SELECT 1")
						return err
					})
				}()
				select {
				case err = <-returned:
				case <-time.After(20 * time.Second):
					thaw()
					t.Fatalf("BeginFunc still blocked 20 s after a %v ctx on a hung server", wait)
				}
				took := time.Since(start)
				require.Error(t, err)
				require.Less(t, took, wait+grace+2*time.Second, "BeginFunc outlived its ctx plus the grace")
				select {
				case <-l.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the holder was not told")
				}
				require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
				thaw()
				requireBackendGone(t, uint32(pid))
				require.Empty(t, rowsIn(t, table), "fn's write committed after its ctx ended")
				requireFree(t, l.Key())
			})
		}
	}
}

// requireBackendGone waits until pid's backend has exited.
func requireBackendGone(t *testing.T, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
		return n == 0
	}, 10*time.Second, 10*time.Millisecond, "backend %d still there", pid)
}
