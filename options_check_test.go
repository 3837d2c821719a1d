package advisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// optionRefusal is one row of the refusals New decides (options_check.go): the options
// involved (by name, for options_doc_test.go), the values, and what New returns directly,
// through a session-mode and through a transaction-mode PgBouncer (nil: it works).
type optionRefusal struct {
	name                         string
	options                      []string // the With functions involved: each one's godoc names the refusal
	opts                         []advisory.Option
	pairs                        []string // connection-string settings
	direct, session, transaction error
	contains                     string // in the refusal's text, wherever it is refused
}

// early reports whether the row is refused on every path: such a refusal must be decided
// before New connects.
func (r optionRefusal) early() bool {
	return r.direct != nil && r.session != nil && r.transaction != nil
}

// errName is the name of a sentinel of optionRefusals.
func errName(err error) string {
	if errors.Is(err, advisory.ErrPooler) {
		return "ErrPooler"
	}
	return "ErrInvalidOption"
}

const s1 = time.Second

var (
	keepalives = []string{"WithClientKeepalive", "WithServerKeepalive", "WithMinMargin"}
	invalid    = advisory.ErrInvalidOption
)

// optionRefusals is every refusal of an option combination, and of an option with the
// path.
var optionRefusals = []optionRefusal{
	{"client keepalive slower than the server's", keepalives, []advisory.Option{
		advisory.WithClientKeepalive(advisory.TCPKeepalive{Idle: 10 * s1, Interval: 5 * s1, Count: 4}),
		advisory.WithServerKeepalive(advisory.TCPKeepalive{Idle: 4 * s1, Interval: 2 * s1, Count: 3})}, nil,
		invalid, invalid, invalid, "margin"},
	{"a margin the keepalives do not give", keepalives, []advisory.Option{advisory.WithMinMargin(11 * s1)}, nil,
		invalid, invalid, invalid, "margin"},
	{"libpq keepalive keys in the connection string beside WithClientKeepalive", []string{"WithClientKeepalive"},
		[]advisory.Option{advisory.WithClientKeepalive(advisory.TCPKeepalive{Idle: 4 * s1, Interval: 2 * s1, Count: 3})},
		[]string{"keepalives_idle=4"}, invalid, invalid, invalid, "in one place"},
	{"WithWaitSessions without WithSharedSessions", []string{"WithWaitSessions", "WithSharedSessions"},
		[]advisory.Option{advisory.WithWaitSessions(2)}, nil, invalid, invalid, invalid, "without WithSharedSessions"},
	{"WithSharedSessions with WithHolding(HoldingTransaction)", []string{"WithSharedSessions", "WithHolding"},
		[]advisory.Option{advisory.WithSharedSessions(8), advisory.WithHolding(advisory.HoldingTransaction)}, nil,
		invalid, invalid, invalid, "transaction holdings"},
	{"WithSharedSessions", []string{"WithSharedSessions"}, []advisory.Option{advisory.WithSharedSessions(8)}, nil,
		nil, nil, invalid, "transaction holdings"},
	{"WithSharedSessions with WithWaitSessions", []string{"WithSharedSessions", "WithWaitSessions"},
		[]advisory.Option{advisory.WithSharedSessions(8), advisory.WithWaitSessions(2)}, nil,
		nil, nil, invalid, "transaction holdings"},
	{"WithHolding(HoldingSession)", []string{"WithHolding"},
		[]advisory.Option{advisory.WithHolding(advisory.HoldingSession)}, nil,
		nil, nil, advisory.ErrPooler, "WithHolding(HoldingSession)"},
	{"WithHeartbeat(0)", []string{"WithHeartbeat"}, []advisory.Option{advisory.WithHeartbeat(0)}, nil,
		nil, nil, invalid, "WithHeartbeat(0) with transaction holdings behind a proxy"},
	{"WithHeartbeat(0) with WithHolding(HoldingTransaction)", []string{"WithHeartbeat", "WithHolding"},
		[]advisory.Option{advisory.WithHeartbeat(0), advisory.WithHolding(advisory.HoldingTransaction)}, nil,
		nil, invalid, invalid, "WithHeartbeat(0)"},
	{"WithHeartbeat(25s)", []string{"WithHeartbeat"}, []advisory.Option{advisory.WithHeartbeat(25 * s1)}, nil,
		nil, invalid, invalid, "behind a proxy"},
	{"WithHeartbeat(8s) with WithMinMargin(8s)", []string{"WithHeartbeat", "WithMinMargin"},
		[]advisory.Option{advisory.WithHeartbeat(8 * s1), advisory.WithMinMargin(8 * s1)}, nil,
		nil, invalid, invalid, "minimum margin 8s"},
	{"WithHeartbeat(8s) with a shorter server keepalive", []string{"WithHeartbeat", "WithServerKeepalive"},
		[]advisory.Option{advisory.WithHeartbeat(8 * s1),
			advisory.WithClientKeepalive(advisory.TCPKeepalive{Idle: 2 * s1, Interval: s1, Count: 3}),
			advisory.WithServerKeepalive(advisory.TCPKeepalive{Idle: 6 * s1, Interval: 3 * s1, Count: 4})}, nil,
		nil, invalid, invalid, "lengthen the server's keepalive"},
}

// TestEveryOptionRefusal runs New with each row of optionRefusals directly, through a
// real PgBouncer in session mode and in transaction mode, and with nothing to connect
// to: a row refused everywhere is refused before New connects (not a connection error),
// a row that depends on the path is not.
func TestEveryOptionRefusal(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	session := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	tx := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	const nowhere = "host=127.0.0.1 port=1 connect_timeout=1 sslmode=disable"
	for _, r := range optionRefusals {
		t.Run(r.name, func(t *testing.T) {
			for _, p := range []struct {
				name, dsn string
				want      error
			}{{"direct", dsn(t), r.direct}, {"session pooler", session.DSN(), r.session}, {"transaction pooler", tx.DSN(), r.transaction}} {
				refusedAs(t, p.name, pgtest.WithPairs(p.dsn, r.pairs...), r, p.want)
			}
			_, err := advisory.New(ctxT(t), nowhere+" "+strings.Join(r.pairs, " "), r.opts...)
			if r.early() {
				require.ErrorIs(t, err, r.direct, "nothing to connect to: refused before connecting")
			} else {
				require.Error(t, err)
				require.False(t, errors.Is(err, advisory.ErrInvalidOption) || errors.Is(err, advisory.ErrPooler),
					"nothing to connect to: the path decides, so New must have tried to connect: %v", err)
			}
		})
	}
}

// refusedAs runs New on connString with r's options and checks that it returns want, or
// works where want is nil.
func refusedAs(t *testing.T, path, connString string, r optionRefusal, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, connString, r.opts...)
	if want == nil {
		require.NoError(t, err, "%s: works", path)
		m.Close()
		return
	}
	if m != nil {
		m.Close()
	}
	require.ErrorIs(t, err, want, "%s", path)
	assert.Contains(t, err.Error(), r.contains, "%s", path)
	t.Logf("%s: %v", path, err)
}
