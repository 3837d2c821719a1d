package main

// sharedNotes is the section of docs/benchmarks.md on holdings that share sessions (issue
// 38): figures of -shared and -shared-idle runs, typed from their output (the runs write
// docs/benchmarks-shared.json, which keeps every point).
const sharedNotes = `## Shared sessions (issue 38)

` + "`cd bench && go run . -shared`" + ` runs issue 38's fleet: raw pgx, the library's default,
the library ` + "`WithSharedSessions`" + `, and the library ` + "`WithSharedSessions`" + ` +
` + "`WithWaitSessions(6)`" + `, one after another in rotated order, 20 replicas × 50 goroutines
(pools of 50 for all four), each holder working 2 ms under the lock, uniform and hot
90/10. Over 1,000 names: 3 rounds of 20 s windows after 10 s untimed (took 14 min); over
10,000 names: 1 round of 10 s windows, run before ` + "`WithWaitSessions`" + ` existed. Unpinned,
on linux/amd64, 2 CPUs (AMD EPYC), go1.26.8, a local PostgreSQL 15 (fsync off,
max_connections 1,050). The machine is saturated throughout (load average up to 54: 1,000
goroutines and up to 1,000 backends on 2 CPUs), so acquire latencies are tens of
milliseconds for every implementation. Connections are the server's client backends, the
most seen; memory is what the replicas' backends added (PSS); CPU is per lock taken. Every
point is in [benchmarks-shared.json](benchmarks-shared.json).

1,000 names, per round (ratios to raw in the same round):

| workload | implementation | locks/s | / raw | p50 | p99 | server conns | server memory | client CPU | server CPU |
|---|---|---|---|---|---|---|---|---|---|
| uniform | raw pgx | 9,505; 10,212; 9,967 | 1 | 32 ms | 378-401 ms | 1,000 | 1,158-1,162 MB | 79-86 µs | 91-109 µs |
| uniform | default | 7,110; 7,964; 7,994 | 0.75x; 0.78x; 0.80x | 42-47 ms | 443-529 ms | 1,000 | 1,349 MB | 101-116 µs | 122-136 µs |
| uniform | ` + "`WithSharedSessions`" + ` | 10,857; 11,705; 12,141 | 1.14x; 1.15x; 1.22x | 33-39 ms | 254-270 ms | 954-965 | 1,305-1,323 MB | 75-83 µs | 78-91 µs |
| uniform | **+ ` + "`WithWaitSessions(6)`" + `** | 17,979; 17,681; 18,528 | **1.89x; 1.73x; 1.86x** | 17-21 ms | 175-310 ms | **140** (14 %) | 191-192 MB | 58-63 µs | 48 µs |
| hot 90/10 | raw pgx | 8,081; 9,422; 8,433 | 1 | 19-45 ms | 671-1,058 ms | 1,000 | 1,158 MB | 97-105 µs | 105-121 µs |
| hot 90/10 | default | 5,797; 6,354; 6,220 | 0.72x; 0.67x; 0.74x | 58-69 ms | 1,168-1,239 ms | 1,000 | 1,345-1,350 MB | 133-157 µs | 148-158 µs |
| hot 90/10 | ` + "`WithSharedSessions`" + ` | 5,450; 5,760; 5,088 | 0.67x; 0.61x; 0.60x | 77-100 ms | 1,101-1,145 ms | 864-883 | 1,327-1,353 MB | 157-169 µs | 173-193 µs |
| hot 90/10 | **+ ` + "`WithWaitSessions(6)`" + `** | 7,399; 7,562; 7,770 | **0.92x; 0.80x; 0.92x** | 62-96 ms | 550-851 ms | **140** (14 %) | 193-194 MB | 138-142 µs | 111-128 µs |

10,000 names, one round (before ` + "`WithWaitSessions`" + `):

| workload | raw locks/s | default / raw | shared / raw | conns raw, default, shared | server memory raw, default, shared | client CPU per lock raw, default, shared |
|---|---|---|---|---|---|---|
| uniform | 11,949 | 0.72x | **2.51x** | 1000, 1000, 674 | 1,163, 1,351, 913 MB | 71, 105, 37 µs |
| hot 90/10 | 9,399 | 0.80x | **1.21x** | 1000, 1000, 899 | 1,165, 1,350, 1,225 MB | 86, 109, 81 µs |

- **Where locks are free, sharing is faster than a session per lock**, raw pgx's
  included: a shared session sends every try and unlock queued at that moment in one
  statement (shared_batch.go), so a burst of calls costs the server one statement and the
  client one round trip. Over 10,000 names (one try in ten finds its lock taken) it took
  2.51x raw's locks/s at half raw's client CPU per lock.
- **Where most locks are taken, the waits decide.** Over 1,000 names, 1,000 holders hold
  most of the names at any moment, so most calls wait. With ` + "`WithSharedSessions`" + ` alone
  each wait is a session of its own, and the fleet still used 86-97 % of raw's
  connections.
- **` + "`WithWaitSessions(6)`" + ` bounds those sessions.** At most 6 Locks per replica wait, and
  then hold, on sessions of their own. The others park: they hold no connection, and try
  again in the shared sessions' batches, all of a replica's parked Locks at the same 8 ms
  tick. The fleet then stood on 140 server connections (14 % of raw's: 6 places and one
  shared session per replica), with 191-194 MB of server memory against raw's 1,158.
  - Uniform: 1.73x-1.89x raw's locks/s, p50 and p99 lower than raw's. 50 fewer backends
    per replica leave the 2 CPUs to the work: server CPU per lock is half of raw's.
  - Hot 90/10: 0.92x, 0.80x and 0.92x raw (median 0.92x), against the default's
    0.67x-0.74x. Parked Locks for hot keys try many times before they win (client CPU per
    lock 138-142 µs against raw's 97-105 µs). Their p50 is higher (62-96 ms against
    19-45 ms): a parked Lock never goes before the server's queue, and notices a release
    only at its next try. Their p99 is lower (550-851 ms against 671-1,058 ms).
  - That raw is no floor for hot keys (issue 47): it opens all 1,000 connections before
    the window. Raw at the shared sessions' budget (a pool of 7 per replica: 140
    connections) and raw's pool opening connections as needed both beat parking on hot
    keys: 0.79x-0.88x and 0.69x-0.89x of their locks/s, with a p99 about twice theirs
    (` + "`" + `-shared -shared-skews hot -shared-impls "advisory WithWaitSessions,raw same budget,raw on demand"` + "`" + `,
    2 rounds of 15 s, 2026-11-29; see [scale.md](scale.md) for the figures and when not
    to park).
  - Before the ticks, each parked Lock tried on a timer of its own, one round trip per
    try: hot 0.76x-0.93x (median 0.81x) on 18-19 % of raw's connections, client CPU per
    lock 165-185 µs. In one profile of that build (hot, 20 replicas), the shared
    sessions' runners took 30 % of the client's CPU, mostly the write system call of
    small statements.
- **The issue's target** (at least 0.9x raw's locks/s on at most 20 % of raw's
  connections) is met by the median of both workloads: uniform 1.86x on 14 %, hot 0.92x
  on 14 %. The hot workload's worst round was 0.80x.

` + "`cd bench && go run . -shared-idle`" + ` holds many locks and keeps them: processes each take
their locks from as many goroutines at once, then one session of the first process is
terminated (same machine and server; max_connections sized for the run):

| run | holdings | server connections | per process | server memory added (PSS) | clients (RSS, all) | taken in | told after a termination |
|---|---|---|---|---|---|---|---|
| shared, 100 processes × 100 locks | 10,000 | **200** | 2.0 | 298 MB | 2,225 MB | 0.5 s | 64 holdings on the session: p50 1.35 ms, max 1.40 ms |
| shared, 10 × 1,000 | 10,000 | 156 | 15.6 | 232 MB | 269 MB | 0.4 s | 80 holdings: p50 1.13 ms, max 1.16 ms |
| shared, 1 × 10,000 | 10,000 | 97 | 97 | 146 MB | 76 MB | 0.3 s | 354 holdings: p50 2.65 ms, max 3.10 ms |
| shared, 20 × 50 | 1,000 | 20 | 1.0 | 32 MB | 422 MB | 0.03 s | 50 holdings: p50 0.99 ms, max 1.03 ms |
| default, 20 × 50 | 1,000 | 1,000 | 50 | 1,310 MB | 503 MB | 1.9 s | 1 holding: 0.95 ms |

How the cost grows with holdings per process, 10,000 holdings in all: 100 per process
stand on 2 sessions each, 1,000 on 15.6, 10,000 on 97, because a process opens a shared
session per 64 calls in flight and all its locks are taken at once here. Fewer, fuller
processes cost the server less (146 MB against 298 MB) and the clients much less (76 MB
against 2,225 MB: most of that is each process's own runtime and pool). A terminated
session tells its holdings one after another: 354 holdings were all told within 3.1 ms.

The default cannot hold 10,000 locks on a server with PostgreSQL's default max_connections
(100): it needs a session per lock. Shared, a process needs one session per 64 calls in
flight (` + "`hostQueue`" + `); each shared session's backend costs what any backend does (about
1.3 MB here), and its locks about 30 bytes each in the shared lock table. The next limit
is that table: max_locks_per_transaction × (max_connections + max_prepared_transactions)
slots for the whole server; ` + "`TestSharedLockTableFull`" + ` filled it from shared sessions at
34,078 locks (64 × 300 connections and the table's slack), with every Lock that returned
still held and nothing else left in pg_locks.

The default path did not move: BenchmarkCycleRatio, the commit before shared sessions
(177cf4e) and after, alternated 6 times each, every process on CPU 0 (taskset): Lock +
Unlock median 1.061x raw (1.045-1.077x) before, 1.059x (1.019-1.094x) after; TryLock +
Unlock 1.058x (1.044-1.076x) before, 1.067x (1.010-1.097x) after. ` + "`WithWaitSessions`" + `
touches the default path only to carry a place from a wait to its holding: ea46ad8 and
after it, alternated 8 times each, on CPU 0: Lock + Unlock median 1.051x (1.030-1.060x)
before, 1.064x (1.037-1.078x) after; TryLock + Unlock 1.055x (1.038-1.058x) before,
1.051x (1.039-1.067x) after. The ranges overlap.

`
