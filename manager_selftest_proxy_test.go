package advisory_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestNewThroughRoundRobinNeverBlamesTheEngine (issue 44, item 3): through HAProxy in TCP
// mode with balance roundrobin over two independent servers (as a proxy is, for a
// moment, while a cluster switches over), New's self-test can take the key on one server
// and get it again on the other. That used to be reported as ErrUnsupportedServer ("the
// server does not enforce advisory locks"); it is ErrServerChanged now, which says to
// retry, and New never names the engine there.
func TestNewThroughRoundRobinNeverBlamesTheEngine(t *testing.T) {
	t.Parallel() // its own servers and HAProxy; it counts outcomes, no time
	rr := pgtest.RoundRobinForTest(t)
	counts := map[string]int{}
	for i := range 20 {
		m, err := advisory.New(ctxT(t), rr.DSN())
		switch {
		case err == nil:
			counts["ok"]++
			m.Close()
		case errors.Is(err, advisory.ErrServerChanged):
			counts["server changed"]++
			require.NotErrorIs(t, err, advisory.ErrUnsupportedServer)
		default:
			require.NoError(t, err, "New %d", i)
		}
	}
	t.Logf("20 News through round-robin: %v", counts)
	require.NotZero(t, counts["server changed"], "the self-test met two servers")
}
