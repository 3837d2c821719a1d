// Package modelcheck is the model-based randomized test of the whole public API of
// package advisory. The root package's TestModel and TestModelChecked run it with [Run],
// giving it the test server, an admin pool and extra options through a [Config].
//
// # What it drives
//
// Three Managers (each with its own application_name), their Locks and Sessions, and a
// model of what each holds. Every step runs a batch of one to three calls at once, drawn
// from a seeded generator (generator.go): Lock, TryLock and their shared forms,
// Lock.Unlock (also twice, and after a loss), Session and its Lock, TryLock, LockAll,
// TryLockAll, Unlock and Close, Do and Lead with a function that returns nil, an error,
// panics or waits, Holders, pg_terminate_backend of a random holder, Manager.Close
// followed by a new Manager, and the fencing API: Lock.BeginFunc, Session.BeginFunc and
// DoTx (fn as for Do, after inserting a row), Lock.Token and CheckToken (fence_ops.go).
// Few lock names, so calls contend. Each call's ctx is already done, cancelled by a timer
// at a random instant, given a random deadline, cancelled at its n-th Err check (package
// internal/checkctx), or only bounded (2.5 s).
//
// # What it checks
//
// After a batch, each call's result is judged against the contract, given what the model
// knew before (judge*.go, fence_judge.go): a call whose ctx was already done returns
// ctx's error and changes nothing; a call returns within 1 s of its ctx ending; TryLock
// of a held key is ErrLocked; Unlock twice is ErrNotHeld; calls after Close are
// ErrClosed; after Do and Lead return (by panic too) they hold nothing; a terminated
// holder is told (ErrLockLost). Then the invariants are polled until the server agrees
// (invariants.go): every live handle's locks are granted in pg_locks to its backend;
// every lock of the model's backends is reported by a live handle; no waiters; holders of
// one key are compatible; each Manager's acquired connections equal its live Locks and
// Sessions. Then the fenced calls' rows (fence_rows.go): committed if and only if the
// call returned nil (a loss overlapping the COMMIT may be in doubt), on the lock's
// backend, which held the keys at COMMIT; and the tokens against the table. At the end,
// after closing everything: nothing in pg_locks, no goroutine left. The Managers use a
// short WithCancelGrace: the 1 s bound is about calls that ignore their ctx, not about
// PostgreSQL dropping a CancelRequest under load.
//
// # Replaying a seed
//
// A failure reports the seed, the last steps, the model and pg_locks, and a replay line.
// ADVISORY_MODEL_SEED replays a seed (the calls drawn depend on results too, so a replay
// follows the same path as long as the results are the same); ADVISORY_MODEL_DURATION
// sets the run time (default 60s under CI=true, else 20s); ADVISORY_MODEL_VERBOSE=1 logs
// every step. From the repository's root:
//
//	ADVISORY_MODEL_SEED=12345 go test -race -run TestModel .
package modelcheck
