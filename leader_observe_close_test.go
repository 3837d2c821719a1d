package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestObserveTellsOfTheManagersClose (issue 37, item 7): what Observe's doc says of its
// end. When the Manager closes, the channel is closed, after at most one more value,
// whose Err wraps ErrClosed (a read the Close overtook; it happens or not, as the Close
// lands); when ctx ends it is closed with no error value. The doc did not mention the
// ErrClosed value; this test pins the behaviour the doc now describes.
func TestObserveTellsOfTheManagersClose(t *testing.T) {
	t.Parallel()
	withErr := 0
	for range 20 {
		// Reading all the time, the observer is often in a read when Close lands.
		m := newManager(t, nil, advisory.WithLeaderRecheck(time.Microsecond))
		ch, err := m.Observe(ctxT(t), t.Name())
		require.NoError(t, err)
		<-ch // the leader now
		m.Close()
		rest := readAll(t, ch)
		require.LessOrEqual(t, len(rest), 1, "at most one value after Close: %+v", rest)
		for _, l := range rest {
			require.ErrorIs(t, l.Err, advisory.ErrClosed)
			withErr++
		}
	}
	t.Logf("20 Closes: %d delivered a Leader with ErrClosed before the channel closed", withErr)
	m := newManager(t, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := m.Observe(ctx, t.Name())
	require.NoError(t, err)
	<-ch
	cancel()
	for _, l := range readAll(t, ch) {
		assert.NoError(t, l.Err, "no error value when ctx ends")
	}
}

// readAll returns the values ch delivers until it is closed, failing t after 10 s.
func readAll(t *testing.T, ch <-chan advisory.Leader) []advisory.Leader {
	t.Helper()
	var out []advisory.Leader
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, l)
		case <-timeout:
			t.Fatal("the channel was not closed")
		}
	}
}
