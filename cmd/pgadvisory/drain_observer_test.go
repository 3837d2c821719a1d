package main_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// backendSeen is one server backend as an observer saw it, by the server's clock.
type backendSeen struct {
	pid         uint32
	app         string
	first, last time.Time // the first and the last sample that listed it
}

// observer samples pg_stat_activity every few milliseconds on a connection of its own and
// records, per backend whose application_name is LIKE its pattern, when it was first and
// last seen. A sample's time is clock_timestamp() read after the statement's snapshot of
// the activity was taken, so a backend was alive at or before its last-seen time: the
// last-seen time never makes a backend look gone earlier than it was.
type observer struct {
	mu   sync.Mutex
	seen map[uint32]backendSeen
	stop chan struct{}
	done chan error
}

// observe starts an observer for pattern; end stops it.
func observe(t *testing.T, pattern string) *observer {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	o := &observer{seen: map[uint32]backendSeen{}, stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		defer conn.Close(context.Background())
		o.done <- o.loop(conn, pattern)
	}()
	t.Cleanup(func() { o.end(t) })
	return o
}

func (o *observer) loop(conn *pgx.Conn, pattern string) error {
	for {
		select {
		case <-o.stop:
			return nil
		default:
		}
		if err := o.sample(conn, pattern); err != nil {
			return err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (o *observer) sample(conn *pgx.Conn, pattern string) error {
	rs, err := conn.Query(context.Background(), `SELECT pid, application_name, clock_timestamp()
		FROM pg_stat_activity WHERE application_name LIKE $1`, pattern)
	if err != nil {
		return err
	}
	var b backendSeen
	var at time.Time
	_, err = pgx.ForEachRow(rs, []any{&b.pid, &b.app, &at}, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		prev, ok := o.seen[b.pid]
		if !ok {
			prev = backendSeen{pid: b.pid, app: b.app, first: at}
		}
		prev.last = at
		o.seen[b.pid] = prev
		return nil
	})
	return err
}

// end stops the observer (once) and returns what it saw.
func (o *observer) end(t *testing.T) map[uint32]backendSeen {
	t.Helper()
	select {
	case <-o.stop:
	default:
		close(o.stop)
		require.NoError(t, <-o.done, "the observer failed")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[uint32]backendSeen, len(o.seen))
	for pid, b := range o.seen {
		out[pid] = b
	}
	return out
}
