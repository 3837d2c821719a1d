package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestHashSlotsMatchTheSemaphore: the keys hash --slots prints are the ones a Semaphore
// of the library takes.
func TestHashSlotsMatchTheSemaphore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := advisory.New(ctx, dsn(t))
	require.NoError(t, err)
	defer m.Close()
	s, err := m.Semaphore("workers", 3)
	require.NoError(t, err)
	r := cli(t, "hash", "--slots", "3", "workers")
	require.Equal(t, 0, r.code, r.stderr)
	for i, k := range s.SlotKeys() {
		assert.Contains(t, r.stdout, fmt.Sprintf("SELECT pg_try_advisory_lock(%d);  -- workers#slot/%d\n", k, i))
	}
	assert.Contains(t, r.stdout, fmt.Sprintf("SELECT pg_advisory_lock(%d);  -- workers#turnstile\n", s.TurnstileKey()))
	assert.Equal(t, 3, strings.Count(r.stdout, "#slot/"))
	assert.Equal(t, 64, cli(t, "hash", "--slots", "-1", "workers").code)
	assert.Equal(t, 64, cli(t, "hash", "--slots", fmt.Sprint(advisory.MaxSemaphoreLimit+1), "workers").code)
}
