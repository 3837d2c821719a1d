package advisory

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A named lock's statement carries the name, as a comment that pg_stat_activity shows
// (Holders, pgadvisory status and anyone looking read it there), and on a direct
// connection its key as a literal: one text per name, which the server parses at each
// use until the connection has used it often enough to prepare it
// (pin_prepared.go). A fleet that locks many names, each rarely on any one
// connection, paid that parse on nearly every lock. Measured at fleet scale (bench
// -statements: 1,000 backends, 1,000 names, plain pgx, 7 interleaved reps on 2 CPUs): the
// named statement cost 1.31x the by-key statement's server CPU per lock when paced
// (each backend used about once a second; +0.16 ms at the median acquire), and took 0.88x
// its locks/s saturated.
//
// So such a lock is first tried by key, with the prepared statement every key shares,
// and in the same round trip the session runs a statement that is only the name's
// comment: once it holds the lock, pg_stat_activity shows the name, as it did. Only a try
// that finds the lock taken sends the named statement and waits, so that a waiter, too,
// shows the name it waits for. Measured the same way: 1.06x the by-key statement's server
// CPU paced, in two runs (no lock was contended there). Saturated, where 39 % of locks
// found theirs taken and paid the second round trip, it took 0.94x and 0.87x the by-key
// statement's locks/s against the named statement's 0.88x and 0.90x: no gain shown there.
// (Sending the blocking statement by key with the comment after it measured no better,
// 0.99x and 0.90x, and a waiter would then show no name.) A name a connection has
// prepared keeps its one prepared statement: nothing is parsed there.
//
// Where locks are contended the try loses: each lock found taken pays a second round
// trip, client and server. Measured again (bench -statements, 3 reps, this machine):
// saturated, with 36 % found taken, the try cost 98 µs of server and 46 µs of client CPU
// per lock against the named statement's 94 and 40; paced, with none found taken, 104
// and 211 against 127 and 228. Break-even is near one try in ten found taken. At fleet
// scale the library's own path showed it more (20 replicas, 50 goroutines each, 10 run
// with the try and 10 without side by side on one server, disjoint names): without the
// try 1.12-1.22x the locks/s with the hot-key skew, 1.20x uniform. So a Manager keeps an
// average of how often its Lock calls' tries found their locks taken (contention), and
// past one in ten a Lock sends the named statement at once, tried first only once in
// probeEvery calls to keep the average current. A per-name memory of the last lock found
// taken was measured too (0.92x the locks/s without the try, hot): under a uniform load a
// name's last outcome does not predict its next, the Manager's share does. The named
// statement goes by the simple query protocol, through pgconn (simpleRow): pgx's
// QueryRow would scan its text for arguments first.

// tryByKeyFirst takes the pin's named lock as above: named is the named statement (the lock
// statement, or the try statement when try), whose use unprepared was counted. It
// returns as rowAs does on a direct connection: the connection's pid, and whether the
// lock is held (for try, whether the try got it; for a lock, true once held).
func (p *pin) tryByKeyFirst(ctx context.Context, named string, try bool) (uint32, *bool, error) {
	p.rowPID, p.rowOK = p.pid, pgtype.Bool{}
	byKey := baseStatements[1][b2i(p.shared)][0].tryLock // direct, this mode, one bigint
	for again := false; ; again = true {
		sd, err := p.byKeyStatement(ctx, byKey)
		if err != nil {
			return p.pid, nil, err
		}
		b := &pgconn.Batch{}
		b.ExecPrepared(sd.Name, [][]byte{strconv.AppendInt(nil, int64(p.key), 10)}, nil, nil)
		b.ExecParams(leadingComment(named), nil, nil, nil, nil)
		got, err := readBool(p.pg.ExecBatch(ctx, b))
		switch {
		case err != nil && !again && p.m.ownPrepared && sqlState(err) == "26000":
			// Deallocated since it was prepared (see ownRow): the batch stopped at its
			// Bind, before anything ran. Prepare it again and run the batch once more.
			p.forgetOwn(byKey)
			continue
		case err != nil:
			return p.pid, nil, err
		case try:
			p.rowOK = pgtype.Bool{Bool: got, Valid: true}
			return p.pid, &p.rowOK.Bool, nil
		}
		p.m.taken.record(!got)
		if got {
			p.rowOK = pgtype.Bool{Bool: true, Valid: true}
			return p.pid, &p.rowOK.Bool, nil
		}
		return p.rowAs(ctx, named, true, true)
	}
}

// byKeyStatement returns the key's try statement prepared on p's connection: the
// library's own (see ownStatement), which TryLockKey runs too, or where that path is off,
// pgx's, named by its text as its statement cache would.
func (p *pin) byKeyStatement(ctx context.Context, byKey string) (*pgconn.StatementDescription, error) {
	if p.m.ownPrepared {
		return p.ownStatement(ctx, byKey)
	}
	return p.pc.Conn().Prepare(ctx, byKey, byKey)
}

// leadingComment returns the name's comment that starts a named statement (see
// nameComment: the name is quoted with every '*' escaped, so the first "*/" ends it).
func leadingComment(sql string) string {
	return sql[:strings.Index(sql, " */ ")+len(" */ ")]
}

var errNotOneRow = errors.New("advisory: the lock statement returned no single row")

// readBool reads the results of one round trip whose first statement returns one row of
// one bool in text format (a lock or try statement) and whose others return no row
// (tryByKeyFirst's comment), and returns that bool.
func readBool(mrr *pgconn.MultiResultReader) (bool, error) {
	got, rows, err := false, 0, error(nil)
	for i := 0; mrr.NextResult(); i++ {
		rr := mrr.ResultReader()
		for rr.NextRow() {
			if v := rr.Values(); i == 0 && len(v) == 1 {
				got, rows = string(v[0]) == "t", rows+1
			}
		}
		if _, cerr := rr.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	if err == nil && rows != 1 {
		err = errNotOneRow
	}
	return got, err
}

// contention tracks how often a Manager's named Lock calls, tried by key first, found
// their lock taken: an average of the latest tries' outcomes, in which each new one
// weighs 1/16 (so that one wait alone, for a migration or a leader, does not move it past
// the mark). Past one try in ten found taken, the try costs more than it saves (each
// found taken pays a second round trip), so Lock sends the named statement at once, as
// the one statement it waits in, and tries first again only once in probeEvery calls, to
// keep the average current. TryLock always tries first (it sends nothing more) and is not
// counted: a TryLock polling a lock held elsewhere says nothing of other locks.
type contention struct {
	rate  atomic.Int32  // the average, in 1/65536
	calls atomic.Uint32 // Lock calls that skipped or probed while contended
}

const (
	contendedAbove = 1 << 16 / 10 // one try in ten found taken
	probeEvery     = 8
)

// skipTry reports whether a named Lock call sends the named statement without trying by
// key first.
func (c *contention) skipTry() bool {
	return c.rate.Load() > contendedAbove && c.calls.Add(1)%probeEvery != 0
}

// record counts a named Lock call's try by key: taken if it found the lock taken. Two
// calls recording at once may lose one outcome, which only delays the average.
func (c *contention) record(taken bool) {
	var v int32
	if taken {
		v = 1 << 16
	}
	r := c.rate.Load()
	c.rate.Store(r + (v-r)/16)
}

// simpleRow runs sql, a direct named statement that carries its key and returns one bool,
// by the simple query protocol, and sets p.rowOK: unprepared, in one round trip. (pgx's
// QueryRow in its simple-protocol mode sends the same, after scanning the text for
// arguments it does not have.)
func (p *pin) simpleRow(ctx context.Context, sql string) error {
	got, err := readBool(p.pg.Exec(ctx, sql))
	if err == nil {
		p.rowOK = pgtype.Bool{Bool: got, Valid: true}
	}
	return err
}
