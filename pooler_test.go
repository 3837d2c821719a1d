package advisory_test

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// txProxy imitates a transaction-pooling proxy: each client connection gets two server
// connections, and route decides, per client transaction (a batch of messages ending in
// Sync or Query), which one runs it: given the client connection's number (in the order
// they connected, from 0) and the batch's. Only what the tests need: no TLS, no cancels.
type txProxy struct {
	ln       net.Listener
	upstream string
	route    func(conn, batch int) int
	conns    int // client connections accepted so far
	wg       sync.WaitGroup
}

func startTxProxy(t *testing.T, route func(conn, batch int) int) string {
	cfg, err := pgxpool.ParseConfig(dsn(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &txProxy{ln: ln, upstream: net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))), route: route}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	port := ln.Addr().(*net.TCPAddr).Port
	return "host=127.0.0.1 port=" + strconv.Itoa(port) + " user=" + cfg.ConnConfig.User +
		" dbname=" + cfg.ConnConfig.Database + " sslmode=disable"
}

func (p *txProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		n := p.conns
		p.conns++
		go func() { defer p.wg.Done(); p.serve(c, n) }()
	}
}

func (p *txProxy) serve(client net.Conn, n int) {
	defer client.Close()
	startup, err := readStartup(client)
	if err != nil {
		return
	}
	var servers [2]net.Conn
	for i := range servers {
		if servers[i], err = net.Dial("tcp", p.upstream); err != nil {
			return
		}
		defer servers[i].Close()
		servers[i].Write(startup)
		out := io.Discard
		if i == 0 {
			out = client // the client sees the first server's start-up answer
		}
		if relayUntilReady(servers[i], out) != nil {
			return
		}
	}
	for batch := 0; ; batch++ {
		msgs, last, err := readBatch(client)
		if err != nil || last == 'X' {
			return
		}
		s := servers[p.route(n, batch)]
		if _, err := s.Write(msgs); err != nil || relayUntilReady(s, client) != nil {
			return
		}
	}
}

func readStartup(c net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:])-4)
	_, err := io.ReadFull(c, body)
	return append(n[:], body...), err
}

// readMessage reads one typed protocol message and returns it whole.
func readMessage(r io.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
	_, err := io.ReadFull(r, body)
	return h[0], append(h[:], body...), err
}

// readBatch reads client messages up to a Sync, a simple Query or a Terminate.
func readBatch(c net.Conn) ([]byte, byte, error) {
	var batch []byte
	for {
		typ, msg, err := readMessage(c)
		if err != nil {
			return nil, 0, err
		}
		batch = append(batch, msg...)
		if typ == 'S' || typ == 'Q' || typ == 'X' {
			return batch, typ, nil
		}
	}
}

func relayUntilReady(server net.Conn, client io.Writer) error {
	for {
		typ, msg, err := readMessage(server)
		if err != nil {
			return err
		}
		if _, err := client.Write(msg); err != nil {
			return err
		}
		if typ == 'Z' {
			return nil
		}
	}
}

// TestTransactionPoolerIsDetected: behind a proxy that moves a connection's statements to
// another backend, New or the lock call fails loudly with ErrPooler instead of "holding" a
// lock that some other session actually holds, and nothing is left held on either
// backend. This proxy is ours and routes deterministically, so each schedule is met every
// time; pooler_real_test.go meets the real PgBouncer.
func TestTransactionPoolerIsDetected(t *testing.T) {
	t.Parallel()
	// The batches before a connection's first lock statement: the set-up's look and
	// settings; on New's connection (the first) also its self-test's take and release of
	// a probe key (see checkEnforced). Its second (the self-test's other session) runs one
	// statement.
	setup := func(conn int) int {
		if conn == 0 {
			return 4
		}
		return 2
	}
	for _, tc := range []struct {
		name  string
		route func(conn, batch int) int
		atNew bool
		want  string
	}{
		// The set-up itself moves: New refuses before the Manager exists.
		{"moved during set-up", func(_, b int) int { return min(b, 1) }, true, "setup statement did not run on its backend"},
		// Set-up on one backend, New's self-test on the other: refused at New, nothing held.
		{"moved before the self-test", func(_, b int) int { return min(b/2, 1) }, true,
			"self-test statement ran on another client's backend"},
		// Set-up on one backend, everything after on the other, which carries no token: the
		// lock statement does nothing there.
		{"moved after set-up", func(c, b int) int { return min(b/setup(c), 1) }, false, "it did nothing there"},
		// After the set-up every transaction alternates: the statement prepared on one
		// backend is missing on the other (the classic PgBouncer symptom).
		{"alternating", func(c, b int) int { return max(b-setup(c)+1, 0) % 2 }, false, "ErrPooler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxied := startTxProxy(t, tc.route)
			ctx := ctxT(t)
			name := t.Name()
			m, err := advisory.New(ctx, proxied)
			if tc.atNew {
				require.ErrorIs(t, err, advisory.ErrPooler)
				assert.Contains(t, err.Error(), tc.want)
				requireFree(t, advisory.KeyOf(name))
				return
			}
			require.NoError(t, err)
			defer m.Close()
			for _, lock := range []func(context.Context, string) (*advisory.Lock, error){m.Lock, m.TryLock} {
				_, err = lock(ctx, name)
				require.ErrorIs(t, err, advisory.ErrPooler)
				if tc.want != "ErrPooler" {
					assert.Contains(t, err.Error(), tc.want)
				}
				assert.True(t, strings.Contains(err.Error(), "PgBouncer"), err.Error())
				requireNoAcquired(t, m)
				requireFree(t, advisory.KeyOf(name))
			}
		})
	}
}
