package pgtest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestStandbysWhileThePrimaryRecyclesWAL (issue 46 item 8): standbys are made of a
// primary that writes and recycles WAL as fast as it can (a record, a segment switch and a
// checkpoint in a loop, as the root package's parallel tests' CREATE DATABASE and other
// base backups' checkpoints did), three at once. A base backup used to fail now and then
// with "requested WAL segment ... has already been removed": its WAL stream began after
// the copy, from a segment a checkpoint had removed meanwhile. Each standby now streams
// through a slot made before the copy; every one starts, and Close drops its slot.
func TestStandbysWhileThePrimaryRecyclesWAL(t *testing.T) {
	t.Parallel()
	server(t) // skips or fails as the package's other tests do without a server
	ctx := ctxT(t)
	primary, err := pgtest.StartLocal(ctx, pgtest.Options{})
	require.NoError(t, err)
	defer primary.Close()
	churn, stop := connect(t, primary.DSN()), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := churn.Exec(context.Background(), "SELECT pg_logical_emit_message(false, 'churn', repeat('x', 100000)); "+
				"SELECT pg_switch_wal(); CHECKPOINT"); err != nil {
				return
			}
		}
	}()
	var made sync.WaitGroup
	for range 3 {
		made.Add(1)
		go func() {
			defer made.Done()
			sb, err := pgtest.StartStandby(ctx, primary)
			if assert.NoError(t, err, "a standby of a primary that recycles WAL") {
				assert.NoError(t, sb.Close())
			}
		}()
	}
	made.Wait()
	close(stop)
	wg.Wait()
	var slots int
	require.NoError(t, connect(t, primary.DSN()).QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots))
	assert.Zero(t, slots, "Close dropped every standby's slot")
}
