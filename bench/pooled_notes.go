package main

// pooledNotes is the section of docs/benchmarks.md on transaction holdings (issue 36):
// figures of the root package's BenchmarkPooledCycleRatio and BenchmarkCycleRatio, which
// need a PgBouncer (this program starts none), taken by hand and written here.
const pooledNotes = `## A lock held as a transaction, through PgBouncer (issue 36)

Behind a transaction pooler each lock is one open transaction: Lock sends BEGIN, the
holding's SET LOCAL settings and pg_advisory_xact_lock in one round trip, Unlock sends
COMMIT. Raw pgx doing the same through the same PgBouncer needs three (Begin, Exec,
Commit, in QueryExecModeExec, as PgBouncer 1.18 needs). The root package's
BenchmarkPooledCycleRatio alternates the three cycles (raw, Lock + Unlock, TryLock +
Unlock) through one real PgBouncer 1.18 in transaction mode (pool of 3), each timed on a
connection that just served an untimed cycle of its own; the test binary, PgBouncer and
PostgreSQL 15 all on CPU 0 (taskset -c 0 on the test binary, whose children inherit it),
3 runs of 3,000 cycles, this machine (AMD EPYC, 2 vCPUs), 2026-11-28:

| cycle | per cycle | ratio to raw (target <= 1.10x) |
|---|---|---|
| raw pgx: BEGIN; SELECT pg_advisory_xact_lock($1); COMMIT | 194.7-198.7 µs | 1.00x |
| advisory Lock + Unlock | | 1.060x, 1.070x, 1.071x |
| advisory TryLock + Unlock | | 1.038x, 1.042x, 1.065x |

Two round trips against three, and still above 1.0x: the holding's settings cost the
server about 40 µs per lock (measured with plain pgconn through the same PgBouncer, pinned
likewise: BEGIN and the lock alone 150-169 µs per cycle, with the three timeouts
cleared 176-183 µs, with every setting the holding sets, keepalive and
client_connection_check_interval included, 192-197 µs, against raw's 202-208 µs). Each
setting set with SET LOCAL is set again, and its socket option applied again, when the
transaction ends. They buy the holding its guarantees behind the pooler (no server
timeout ends it; a cut between the pooler and the server frees the lock within 30 s).

The direct path did not move: BenchmarkCycleRatio, the commit before transaction
holdings (abc74d4) and after, alternated 8 times each, pinned likewise:

| cycle, ratio to raw pgx's | before (8 runs) | after (8 runs) |
|---|---|---|
| Lock + Unlock | median 1.064x (1.015-1.096x) | median 1.057x (1.037-1.084x) |
| TryLock + Unlock | median 1.066x (1.002-1.110x) | median 1.073x (1.049-1.115x) |

`
