package advisory

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// An Option configures a Manager; the With functions make them. Options are applied in
// order by New and NewWithConfig; an invalid value makes them return an error wrapping
// [ErrInvalidOption]. The zero Option changes nothing.
type Option struct {
	apply func(*settings) error
}

func option(f func(*settings) error) Option { return Option{apply: f} }

type settings struct {
	checkedOnly        bool          // tests only: no connection is taken as direct (see export_test.go)
	blindProbe         bool          // tests only: the proxy probe finds nothing (see export_test.go)
	prepareNamedAt     int           // tests only when not 0: the use at which a named statement is prepared (see unprepared)
	hostLinger         time.Duration // tests only when not 0: how long an idle shared session rests (see hostSet.rest)
	clientKeepalive    TCPKeepalive
	clientKeepaliveSet bool     // by WithClientKeepalive
	libpqKeepalive     []string // libpq's client keepalive keys the connection string set (see takeLibpqKeepalive)
	serverKeepalive    TCPKeepalive
	connCheckInterval  time.Duration
	minMargin          time.Duration
	cancelGrace        time.Duration
	logger             *slog.Logger // nil: no logging
	namespace          string
	sessionCap         int
	sessionRetire      int
	sharePer           int           // holdings per shared session (WithSharedSessions); 0: no sharing
	waitSessions       int           // WithWaitSessions: shared Locks waiting on sessions of their own at once; 0: no bound
	parkedCount        *atomic.Int64 // tests only: counts the Locks that waited without a session (see park)
	fenceTable         string        // sanitized, possibly schema-qualified
	leaderTable        string        // WithLeaderTable, sanitized; "": published values are off
	leaderRecheck      time.Duration
	drainWait          time.Duration
	noDrain            bool          // WithoutDrain: Do, DoTx, TryDo and Lead do not drain
	workRoles          []string      // WithWorkRoles: more roles whose tagged sessions a drain waits for
	noNames            bool          // WithoutNamesInActivity: named locks' statements carry no name
	heartbeat          time.Duration // WithHeartbeat; 0: off
	heartbeatSet       bool          // by WithHeartbeat (else a Manager behind a proxy beats by default)
	holding            Holding       // WithHolding
	hooks              Hooks
	handoffMax         int           // WithLocalHandoff: handoffs per run; 0: off
	handoffBudget      time.Duration // WithLocalHandoff: no handoff later than this into a run
}

func defaultSettings() settings {
	return settings{
		clientKeepalive:   defaultClientKeepalive,
		serverKeepalive:   defaultServerKeepalive,
		connCheckInterval: defaultConnCheckInterval,
		minMargin:         defaultMinMargin,
		cancelGrace:       time.Second,
		sessionCap:        defaultSessionCap,
		sessionRetire:     defaultSessionRetire,
		fenceTable:        pgx.Identifier{DefaultFenceTable}.Sanitize(),
		drainWait:         time.Second,
		leaderRecheck:     DefaultLeaderRecheck,
	}
}
