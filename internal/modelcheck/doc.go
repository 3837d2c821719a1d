// Package modelcheck is the model-based randomized test of the whole public API of
// package advisory. The root package's TestModel* tests call [Run], giving it the test
// server, an admin pool and extra Manager options in a [Config].
//
// # What it drives
//
// Three Managers (each with its own application_name), their Locks and Sessions, and a
// model of what each holds. Each step runs one to three calls at once, drawn from a
// seeded generator (generator.go, ops.go) over few lock names, so that they contend: the
// Manager's, Lock's and Session's lock calls, Do and Lead with an fn that returns nil, an
// error, panics or waits, Holders, pg_terminate_backend of a random holder, Close
// followed by a new Manager, and the fencing calls (fence_ops.go). Each call's ctx is
// already done, cancelled by a timer, given a deadline, cancelled at its n-th Err check
// (internal/checkctx), or only bounded (ctxplan.go). With Config.Handoffs (the Managers
// made with advisory.WithLocalHandoff) it also draws batches in which a Lock call queues
// behind a live Lock of its own Manager and that Lock is unlocked, sometimes with its
// backend terminated around the pass (handoff.go), so that locks pass in process.
//
// # What it checks
//
// Each result against the contract, given what the model knew before the batch
// (judge*.go, fence_judge.go): a done ctx returns its error and changes nothing; a call
// returns within 1 s of its ctx ending; TryLock of a held key is ErrLocked; Unlock twice
// is ErrNotHeld; calls after Close are ErrClosed; after Do and Lead nothing is held; a
// terminated holder is told. Then, polled until the server agrees (invariants.go): every
// live handle's locks are granted in pg_locks to its backend and every lock of the
// Managers' backends is some live handle's; nothing waits; holders of a key are
// compatible; each pool's acquired connections equal its live Locks and Sessions. Then
// the fenced rows (fence_rows.go): committed if and only if the call returned nil (or in
// doubt after a loss during COMMIT), on the lock's backend, holding the keys at COMMIT;
// and the tokens against the table. At the end: nothing in pg_locks, no goroutine left.
//
// # Transaction holdings
//
// A Lock or Session of a Manager whose Holding() is HoldingTransaction (judge_tx.go,
// fence_pending.go) is judged by the same rules, and these: its backend is idle in
// transaction while it holds; a BeginFunc that returned nil leaves its row pending,
// invisible to every other session while the holding lives, committed (by the holding's
// backend, holding the keys at COMMIT) when its Unlock or Close returns nil, never if it
// is lost (terminated, its Manager closed, its COMMIT failed), and all or none of its
// pending rows when a termination, a Close of its Manager or its ctx cut that COMMIT; a
// BeginFunc that failed leaves nothing, ever. Some rows are drawn poisoned (a deferred
// trigger fails the COMMIT): the Unlock, the Session's Close or DoTx must then report an
// error, and nothing of the transaction commits. A Session's Unlock of a lock held once
// returns ErrTransactionHolding and keeps it; BeginTxFunc with options is refused with
// ErrTransactionHolding, running nothing. DoTx returns nil if and only if its row
// committed, as with session holdings. The root's TestModelTransaction (every Manager),
// TestModelTransactionMixed (one of three), TestModelTransactionPooled (all three behind
// PgBouncer in transaction mode) and TestModelTransactionHandoff run these.
//
// # Replaying a seed
//
// A failure reports the seed, the last 30 steps, the model and pg_locks, and the line
// that replays it. ADVISORY_MODEL_SEED sets the seed (the calls drawn depend on results
// too, so a replay follows the same path as long as the results are the same),
// ADVISORY_MODEL_DURATION the run time (60s under CI=true, else 20s), and
// ADVISORY_MODEL_VERBOSE=1 logs every step. From the repository's root:
//
//	ADVISORY_MODEL_SEED=12345 go test -race -run TestModel .
package modelcheck
