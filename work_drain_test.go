package advisory_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDrainKeepsTheLockNameVisible: Holders reads a lock's name from its session's last
// statement; the drain's statements on the lock's connection must keep it there, after
// an empty drain and after one that terminated an earlier holder's work.
func TestDrainKeepsTheLockNameVisible(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil)
	lostWithWork(t, first, name)
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		report, err := l.Drain(ctxT(t))
		require.NoError(t, err)
		assert.Len(t, report.Sessions, 1-i)
		hs, err := second.Holders(ctxT(t), name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, name, hs[0].Name, "drain %d", i)
	}
	require.NoError(t, l.Unlock(ctxT(t)))
}
