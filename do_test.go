package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
	"github.com/stretchr/testify/require"
)

// TestHardeningLeadAndDoReleaseWhenCtxEndsAtAnyCheck: whichever check of ctx the
// cancellation lands on, Lead and Do return with the lock released and no connection
// pinned (bug 3: a cancellation right after Lead's Lock succeeded returned with the
// leader lock still held, its connection pinned).
func TestHardeningLeadAndDoReleaseWhenCtxEndsAtAnyCheck(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	name := t.Name()
	runs := map[string]func(ctx context.Context, name string, fn func(context.Context) error) error{"Lead": m.Lead, "Do": m.Do}
	for _, api := range []string{"Lead", "Do"} {
		for n := 1; n <= 30; n++ {
			parent, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
			ctx := checkctx.CancelAt(parent, n)
			err := runs[api](ctx, name, func(context.Context) error { return nil })
			cancel()
			if err != nil {
				require.ErrorIs(t, err, context.Canceled, "%s, ctx cancelled at its check #%d", api, n)
			}
			requireReleased(t, m, name, "%s returned (%v), ctx cancelled at its check #%d", api, err, n)
		}
	}
}

// requireReleased asserts that, soon, nobody holds or waits for name and m pins no
// connection.
func requireReleased(t *testing.T, m *advisory.Manager, name string, format string, args ...any) {
	t.Helper()
	key := advisory.KeyOf(name)
	deadline := time.Now().Add(5 * time.Second)
	for len(lockRows(t, key)) > 0 || m.Stat().AcquiredConns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: 5s later pg_locks rows of the key: %+v, acquired connections: %d",
				fmt.Sprintf(format, args...), lockRows(t, key), m.Stat().AcquiredConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHardeningDoAndLeadReleaseWhenFnPanics: when fn panics, Do and Lead let the panic
// through and release the lock on the way (bug 4: the panic, once recovered, as net/http
// does, left the lock held and its connection pinned).
func TestHardeningDoAndLeadReleaseWhenFnPanics(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	boom := errors.New("boom")
	runs := map[string]func(ctx context.Context, name string, fn func(context.Context) error) error{"Do": m.Do, "Lead": m.Lead}
	for _, api := range []string{"Do", "Lead"} {
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			runs[api](ctx, name, func(context.Context) error { panic(boom) })
		}()
		require.Equal(t, boom, recovered, "%s: fn's panic goes through", api)
		requireReleased(t, m, name, "%s after fn panicked", api)
		// The lock can be taken again, from this Manager and its in-process queue too.
		require.NoError(t, m.Do(ctx, name, func(context.Context) error { return nil }), "%s: Do after the panic", api)
	}
}
