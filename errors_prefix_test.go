package advisory_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// libraryPrefix finds the library's "advisory:" prefix (not "pgadvisory:").
var libraryPrefix = regexp.MustCompile(`(^|[^g])advisory:`)

// TestErrorsSayAdvisoryOnce (issue 37, item 7): errors of the library carry one
// "advisory:" prefix, however deep the cause. New behind a transaction pooler (asked for
// session holdings; or a statement pooler) said
// "advisory: connect: advisory: connection is behind a transaction-pooling proxy",
// TryDo with a negative atLeast "advisory: try-do ...: advisory: invalid option", LeadAs
// without a leader table "advisory: lead ...: advisory: no leader table ...".
func TestErrorsSayAdvisoryOnce(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	var errs []error

	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	_, err := advisory.New(ctx, b.DSN(), advisory.WithHolding(advisory.HoldingSession))
	require.ErrorIs(t, err, advisory.ErrPooler)
	errs = append(errs, err)
	st := pgtest.PgBouncerForTest(t, srv, pgtest.PoolStatement)
	_, err = advisory.New(ctx, st.DSN())
	require.ErrorIs(t, err, advisory.ErrPooler)
	errs = append(errs, err)

	m := newManager(t, nil)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	terminate(t, l.PID())
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was not seen")
	}
	_, err = l.Token(ctx)
	require.Error(t, err)
	errs = append(errs, err)
	_, err = l.Drain(ctx)
	require.Error(t, err)
	errs = append(errs, err)
	errs = append(errs, l.Err(), l.Unlock(ctx))

	_, err = m.TryDo(ctx, t.Name(), -time.Second, func(context.Context) error { return nil })
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
	errs = append(errs, err)
	err = m.LeadAs(ctx, t.Name(), "value", func(context.Context) error { return nil })
	require.ErrorIs(t, err, advisory.ErrNoLeaderTable)
	errs = append(errs, err)

	m.Close()
	_, err = m.Lock(ctx, t.Name())
	errs = append(errs, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = newManager(t, nil).Lock(cctx, t.Name())
	errs = append(errs, err)

	for _, err := range errs {
		require.Error(t, err)
		assert.Len(t, libraryPrefix.FindAllString(err.Error(), -1), 1, "one prefix: %v", err)
		t.Log(err)
	}
}
