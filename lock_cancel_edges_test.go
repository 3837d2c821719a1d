package advisory_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestHardeningCancelLandingBeforeTheStatement: PostgreSQL ignores a CancelRequest that
// reaches a backend while it is reading a command (before the statement starts), which
// happens under load when the backend is not scheduled in time. A cancelled Lock must
// still return promptly and stop the server's wait, not sit out the cancel grace with the
// backend still queued (found by TestModel under load: a Lead cancelled at +30ms returned
// 1.03s later, its backend still waiting). Here the backend is stopped (SIGSTOP) while
// the Lock statement is sent and the ctx ends, and continued 300 ms later.
func TestHardeningCancelLandingBeforeTheStatement(t *testing.T) {
	t.Parallel()
	dsn(t) // skips without a server (fails under CI=true)
	if srv.Kind() != "local" || os.Geteuid() != 0 {
		t.Skip("needs the harness's local server and root, to stop a backend with SIGSTOP")
	}
	const grace = 5 * time.Second // long, so that sitting it out cannot pass for prompt
	m, other := newManager(t, nil, advisory.WithCancelGrace(grace)), newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	s, err := m.Session(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	// Once, so that the statement is prepared on the connection: the Lock below then sends
	// its Bind and Execute at once, and they wait in the stopped backend's socket.
	require.NoError(t, s.Lock(ctx, name))
	require.NoError(t, s.Unlock(ctx, name))
	busy, err := other.Lock(ctx, name)
	require.NoError(t, err)
	t.Cleanup(func() { busy.Unlock(context.Background()) })

	backend := int(s.PID())
	require.NoError(t, syscall.Kill(backend, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(backend, syscall.SIGCONT) })
	lctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	resume := time.AfterFunc(350*time.Millisecond, func() { syscall.Kill(backend, syscall.SIGCONT) })
	defer resume.Stop()
	start := time.Now()
	err = s.Lock(lctx, name)
	took := time.Since(start)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 2*time.Second, "Lock with a 50ms ctx whose backend was stopped for 350ms returned after %v", took)
	require.Eventually(t, func() bool {
		for _, r := range lockRows(t, advisory.KeyOf(name)) {
			if !r.Granted {
				return false
			}
		}
		return true
	}, 500*time.Millisecond, 5*time.Millisecond, "the server still waits for the lock after the cancelled Lock returned")
}

// Session.Unlock has a 5 s bound of its own, whatever its ctx (an interrupted unlock
// would leave it unknown whether the lock is still held): a socket deadline, set for the
// statement and cleared after it. Cleared: a Session idle for longer than the bound
// after an Unlock still works and is not reported lost. Bounded: with the backend
// stopped (SIGSTOP), Unlock with a Background ctx returns after about 5 s, the Session
// lost, and the lock is free once the backend runs again and sees its client gone.
func TestSessionUnlockIsBoundedAndTheBoundIsCleared(t *testing.T) {
	t.Parallel()
	dsn(t) // skips without a server (fails under CI=true)
	if srv.Kind() != "local" || os.Geteuid() != 0 {
		t.Skip("needs the harness's local server and root, to stop a backend with SIGSTOP")
	}
	m := newManager(t, nil)
	ctx := context.Background()
	name := t.Name()
	s, err := m.Session(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	require.NoError(t, s.Lock(ctx, name))
	require.NoError(t, s.Unlock(ctx, name))
	time.Sleep(5500 * time.Millisecond) // past the bound: a deadline left set would fire now
	require.NoError(t, s.Lock(ctx, name))
	require.NoError(t, s.Err())
	requireHeldBy(t, advisory.KeyOf(name), s.PID())

	backend := int(s.PID())
	require.NoError(t, syscall.Kill(backend, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(backend, syscall.SIGCONT) })
	start := time.Now()
	err = s.Unlock(ctx, name)
	took := time.Since(start)
	require.ErrorIs(t, err, advisory.ErrLockLost)
	assert.GreaterOrEqual(t, took, 4900*time.Millisecond, "Unlock gave up before its 5 s bound")
	assert.Less(t, took, 8*time.Second, "Unlock of a stopped backend returned after %v", took)
	select {
	case <-s.Done():
	default:
		t.Fatal("the Session is not ended after its Unlock failed")
	}
	require.NoError(t, syscall.Kill(backend, syscall.SIGCONT))
	// The backend frees the lock when it runs again and finds its client gone (it may
	// first run the unlock that was waiting in its socket): not at the instant of SIGCONT.
	eventually(t, 10*time.Second, func() bool { return len(lockRows(t, advisory.KeyOf(name))) == 0 },
		"the lock of a stopped backend whose Session gave up was still held 10 s after the backend was continued")
}
