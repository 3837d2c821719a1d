package advisory

import "fmt"

// Tokens across promotions. A lock lives on one server: when a standby is promoted, every
// lock held on the old primary is gone with it, and every holding on the new primary is
// newer than all of them. But with asynchronous replication (Patroni's default) the new
// primary may lack the last tokens the old one issued: a counter alone would issue the
// same token twice, to a holder on each side of the promotion, and a stale holder's
// CheckToken would pass. Every promotion starts a new timeline, which the server knows at
// once (the timeline of the WAL it now writes), so a token carries its timeline's floor:
// a token taken on timeline t is at least (t-1)<<40, above every token of an earlier
// timeline (which stay below it as long as a timeline issues fewer than 2^40 tokens of one
// lock). A cluster that was never promoted (timeline 1) has floor 0: its tokens are the
// plain counter, 1, 2, 3... CheckToken refuses a token below the server's floor even if it
// is the newest the server has: its holder held the lock on a server that is no longer
// the primary.

// timelineFloor is the SQL for the current timeline's floor: the timeline is the first 8
// hex digits of the name of the WAL file being written (pg_walfile_name works on a
// primary only, as tokens do), which a promotion changes at once, while
// pg_control_checkpoint's timeline changes only at the next checkpoint.
const timelineFloor = `((` + timelineSQL + ` OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.<<) 40)`

// timelineSQL is the server's current timeline (a primary's: pg_walfile_name fails
// during recovery), as a bigint.
const timelineSQL = `(pg_catalog.concat('x', pg_catalog.substr(pg_catalog.pg_walfile_name(` +
	`pg_catalog.pg_current_wal_lsn()), 1, 8)))::pg_catalog.bit(32)::pg_catalog.int8`

// timelineOf returns the timeline a token was taken on, as far as its floor says: 1 for
// tokens below 2^40.
func timelineOf(token int64) int64 { return token>>40 + 1 }

// noteTimeline records the timeline of a primary a new connection reached, and refuses
// one older than a timeline the Manager has seen: a deposed primary that came back
// writable beside the promoted one (a split brain its cluster caused), where a lock
// would exclude nobody who locks on the new primary.
func (ps *proxyState) noteTimeline(tl uint32) error {
	for {
		seen := ps.timeline.Load()
		switch {
		case tl < seen:
			return fmt.Errorf("%w: the server is on timeline %d, older than timeline %d, which this Manager has "+
				"seen: a primary deposed by a promotion and writable again (a split brain); its locks exclude "+
				"no holder on the new primary, so none is taken there", ErrServerChanged, tl, seen)
		case tl == seen || ps.timeline.CompareAndSwap(seen, tl):
			return nil
		}
	}
}
