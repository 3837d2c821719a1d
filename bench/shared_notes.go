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
    keys: before, 0.79x-0.88x and 0.69x-0.89x of their locks/s, with a p99 about twice
    theirs (2 rounds of 15 s), and on 145-315 connections, not 140: a parked Lock that a
    queue overtook waited beyond the places. Now such a Lock goes first for the next
    place, and a release in the process wakes the Lock parked for the key. Measured
    interleaved with main (` + "`" + `-shared -shared-skews hot -shared-impls "advisory
    WithWaitSessions,raw same budget,raw on demand" -shared-rounds 1 -shared-duration
    10s -fleet-warmup 5s` + "`" + `, 7 runs per build alternating, 2026-11-29 12:51-13:23 UTC,
    unpinned, load 16-68), per-run ratios min / median / max: at the same budget 0.60 /
    0.70 / 1.22x before, **0.69 / 0.85 / 1.04x after**; to raw on demand 0.70 / 0.88 /
    1.00x before, **0.85 / 1.02 / 1.27x after**; connections 160-315 before, **140-147
    after**; p50 254 ms median after (264 before; raw at the budget 259 ms), p99 1.29 s
    median after (1.99 s before; raw at the budget 0.70 s). The 0.9x target at the same
    budget is not met; see [scale.md](scale.md) for where the time goes and when not to
    park.
  - **At a fixed budget, capping the pool beats parking on p99, hardly on locks/s**
    (issue 47, second pass). ` + "`advisory at budget`" + ` is ` + "`WithSharedSessions`" + ` alone with the
    Manager's pool capped at raw's budget (` + "`pool_max_conns=7`" + ` per replica, 140
    connections): a Lock whose key is taken waits for a pool connection, in the pool's
    order, and then in the server's queue on it, as raw's callers do. Three runs of
    ` + "`" + `-shared -shared-skews hot -shared-impls "advisory at budget,advisory at budget
    WithoutNamesInActivity,advisory WithWaitSessions,raw same budget,raw on demand"
    -shared-rounds 3 -shared-duration 10s -fleet-warmup 3s` + "`" + ` (the third without the
    ` + "`WithoutNamesInActivity`" + ` and on-demand rows; 9 rounds in all, order rotated,
    2026-11-29 18:52-19:20 UTC, unpinned, load 7-46 at the starts: the fleets' own),
    per-round ratios to the raw rows of the same round, min / median / max:

    | library, hot 90/10 | / raw same budget (140) | / raw on demand (701-975) | p50, medians of the runs | p99, medians of the runs | server conns |
    |---|---|---|---|---|---|
    | at budget, names in activity (the default) | 0.68 / **0.87** / 1.15x (9 rounds) | 0.87 / 0.98 / 1.29x (6) | 168-189 ms | **573-632 ms** | 140 |
    | at budget, ` + "`WithoutNamesInActivity`" + ` | 0.74 / 0.91 / 1.05x (6) | 0.96 / 1.04 / 1.13x (6) | 149-193 ms | 540-771 ms | 140 |
    | ` + "`WithWaitSessions(6)`" + ` (parked) | 0.71 / **0.81** / 0.91x (9) | 0.84 / 0.95 / 0.97x (6) | 143-193 ms | 712-921 ms | 140 |
    | raw, pool of 7 per replica | 1 | | 155-200 ms | 298-349 ms | 140 |
    | raw, pool of 50, on demand | | 1 | 51-52 ms | 529-658 ms | 701-975 |

    In locks/s neither meets the 0.9x target, and capping is ahead of parking by the
    medians (0.87x against 0.81x) but not round by round: ahead in 5 rounds of 9, behind
    in 4 (the first run put parking ahead in all three rounds, by 0.01-0.08x; the second
    put capping ahead by 0.14-0.35x; the third split). A round's fleet of 1,000
    goroutines on 2 CPUs moves by 20 % from round to round, raw's too. The p99 is the
    steady difference: capping's is lower than parking's in every run (573-632 ms
    against 712-921 ms), still about 1.8x raw's at the budget. Whether the names cost
    anything here is within the spread (medians 0.87x and 0.91x; one run put names
    ahead, the other behind).
    What was tried and not kept: preparing a named statement at its second use on a
    connection instead of its 32nd (` + "`prepareNamedAt`" + `), so that hot names' waits are not
    parsed each time: 0.63x, 0.74x and 0.72x against 0.86x, 0.79x and 0.90x with 32 (3
    runs each alternating, same fleet): in 13-second fleets the prepares cost more than
    they save, and the server kept 70 MB more. A profile of the capped fleet (20
    replicas' clients, 10 s): client CPU 266 µs per lock against raw's 196 µs at the
    budget; the write system call of the two statements costs both the same (84 and 82
    µs per lock); the rest is spread thin (pool, pin, watch registration 5 µs, the
    pool's health peek 3 µs, allocation and channels), no one place above a few µs.
    **After a minute's warm-up, both reach 0.91x** (issue 47, third pass). The runs above
    time 10 s after 3 s: a replica's connections have then prepared few of the hot names'
    statements (a name's statement is prepared at its 32nd use on a connection), so the
    server parses most waits, which a service running for hours does not. The same fleet
    with ` + "`-fleet-warmup 60s`" + ` (` + "`" + `-shared -shared-skews hot -shared-impls "raw same
    budget,advisory at budget,advisory WithWaitSessions,raw on demand" -shared-rounds 3
    -shared-duration 10s -fleet-warmup 60s` + "`" + `; 3 rounds, order rotated, 2026-11-29
    21:44-22:03 UTC, unpinned, nothing else running, load 1.0 at the start), per-round
    ratios min / median / max: at budget **0.78 / 0.91 / 1.01x** raw same budget and
    0.89 / 0.94 / 0.96x raw on demand; parked **0.87 / 0.91 / 1.01x** and 0.93 / 0.96 /
    0.99x. p50 / p99, medians over the rounds: at budget 185 / 632 ms, parked 158 / 802
    ms, raw same budget 193 / 378 ms, raw on demand 84 / 1,101 ms. Client CPU per lock,
    rounds 2 and 3: at budget 230 and 222 µs, raw same budget 230 and 222 µs (round 1,
    288 against 225). A second run of 3 rounds, the same command (23:02-23:24 UTC), ran,
    as found afterwards, beside two CPU hogs (` + "`yes`" + `) left over from a stress test, on
    every row alike; one round's raw-same-budget row ran at 2,014 locks/s and 432 µs of
    client CPU per lock, half its usual rate. Read it as a run under load: at budget 0.75 / 1.00 / 2.06x raw same
    budget and 1.07 / 1.19 / 1.23x raw on demand; parked 0.72 / 0.92 / 1.77x and 1.02 /
    1.03 / 1.13x, on 148-152 connections; p99 medians 786 ms, 997 ms, 460 ms (raw same
    budget) and 1,315 ms (on demand). **Over the 6 rounds, medians: at budget 0.95x raw
    same budget (0.75-2.06x) and 1.01x raw on demand; parked 0.91x (0.72-1.77x) and
    1.00x.** The 0.9x target is met by the medians once the statements are warm, by
    neither in every round; the p99 stays 1.7-2.2x raw's at the budget.
    After the loss watcher's armer was removed (issue 47, sixth pass), the same command
    once more (2026-11-30 04:14-04:35 UTC, unpinned; as found afterwards, beside one CPU
    hog, a ` + "`yes`" + ` left running by a test run just before, on every row alike): at budget **1.00 / 1.20 / 1.21x** raw same budget and 0.88 /
    0.92 / 1.07x raw on demand; parked 0.42 / 1.08 / 1.12x and 0.32 / 0.79 / 1.19x (its
    round 2 ran at 1,853 locks/s and 468 µs of client CPU per lock, against 4,232 and
    4,254 locks/s in the others: an outlier one run cannot explain). p50 / p99, medians
    over the rounds: at budget 182 / 620 ms, parked 178 / 851 ms, raw same budget 217 /
    726 ms, raw on demand 82 / 958 ms; at budget's p99 over raw same budget's, round by
    round, 0.85, 1.46 and 1.04x. Client CPU per lock at budget 183-263 µs, raw same
    budget 229-261 µs. One run of 3 rounds, and raw's own p99 moved from 378 ms to 726
    ms between runs: a reading, not a proof, that at the budget the hot keys now run
    above raw with a p99 near raw's; whether the armer's removal is the cause, one run
    cannot say.
    **It did not hold on a quiet machine.** The same command again (2026-11-30
    05:45-06:05 UTC, nothing else running, load 0.25 at the start): at budget **0.71 /
    0.84 / 0.87x** raw same budget and 0.81 / 0.88 / 0.95x raw on demand; parked 0.72 /
    0.84 / 0.87x and 0.81 / 0.88 / 0.95x. p50 / p99, medians over the rounds: at budget
    171 / 608 ms, parked 149 / 741 ms, raw same budget 143 / 304 ms, raw on demand 81 /
    1,037 ms. Client CPU per lock: at budget 204-228 µs, parked 220-241 µs, raw same
    budget 150-178 µs (229-261 µs in the run beside the hog, which slowed raw's rows more
    than ours: that run's 1.20x was the hog's). **So at the budget, hot keys run at about
    0.85x raw's locks/s (target 0.9x: not met) with a p99 about 2x raw's.** A profile of
    that fleet's 20 clients (one round, ` + "`BENCH_FLEET_CPUPROFILE`" + `, 30 s warm-up; at budget
    4,758 locks/s against raw same budget's 6,451, both clients using the same CPU, 29.3 s
    and 29.8 s of samples): the lock and unlock statements on sessions of their own cost
    what raw's do per lock; the shared sessions' runners take 14.6 % of the client's CPU
    (their batches' statements, with array arguments and results, for the cold names'
    locks and unlocks and the hot names' tries), the route around the statements
    (acquire, pin, watch, release) the rest.
    Tried and not kept: a key's skip window that doubles each time a try finds it taken
    again (1 s up to 16 s) and clears when a try takes it, so that a hot key is tried on
    a shared session only by the one-in-eight probes. Three alternated runs of 2 rounds
    of each build (` + "`" + `-shared-impls "raw same budget,advisory at budget" -fleet-warmup
    30s` + "`" + `, 06:12-06:45 UTC, quiet machine): per-round ratios 0.76-0.87x (median 0.83x)
    with it, 0.63-1.13x (median 0.86x) without; client CPU per lock 198-281 µs with it,
    191-267 µs without. No measurable change, and raw's own client CPU per lock moved
    from 128 to 241 µs between rounds: the rounds of one build spread over 0.5x, wider
    than any difference a change of this size could make.
    Tried and not kept: an armer that registers a holding at once, with no tick, where
    the Manager's recent holdings outlived the millisecond (here every holding lasts 2 ms
    or more, so the delay saves no registration and its tick wakes every millisecond).
    Three alternated runs of 2 rounds of each build (` + "`" + `-shared-impls "raw same
    budget,advisory at budget" -fleet-warmup 3s` + "`" + `, 22:19-22:31 UTC, load 5-55: the fleets'
    own): per-round ratios 0.79-1.05x (mean 0.92x) before, 0.66-1.31x (mean 0.89x) after;
    client CPU per lock 226-294 µs (mean 260) before, 215-280 µs (mean 264) after. No
    measurable change: a busy Manager's tick registers many holdings at once, so its
    wake-up is shared among them. (What suggested it: a build with no armer at all,
    switched by an environment variable not committed, 2 runs of 2 rounds alternated with
    the default, 22:04-22:16 UTC: 0.79-0.99x, mean 0.87x, against 0.64-0.93x, mean 0.77x;
    the alternated runs above did not bear it out.)
    **Shared sessions made cheaper** (issue 47, 4d8755b): an emptied shared session rests
    100 ms before it goes back to the pool, and a batch of one request sends the plain
    try or unlock statement, without arrays. One shared Lock + Unlock at a time now costs
    the client 23 µs of CPU and 33 allocations (15 once the one request ran as a
    Session's statement does, e43d684), against 55-60 µs and 110 before
    (` + "`BenchmarkCycleCounts/shared`" + `, one core; raw pgx 21-22 µs and 13). The fleet,
    56af3b7 and 4d8755b alternated, 2 runs of each build (` + "`" + `-shared -shared-skews hot
    -shared-impls "raw same budget,advisory at budget" -shared-rounds 3 -shared-duration
    10s -fleet-warmup 30s` + "`" + `, raw on demand runs in each round too), then one uniform
    run of each (2026-11-30 08:02-08:48 UTC, nothing else running, load 37-55 at the
    starts: the fleets' own); min / median / max of the 6 (uniform 3) per-round ratios:

    | at budget | after | before |
    |---|---|---|
    | hot / raw same budget | 0.81 / **0.88** / 1.27x | 0.70 / 0.84 / 0.98x |
    | hot / raw on demand | 0.95 / 1.03 / 1.14x | 0.90 / 0.92 / 1.26x |
    | hot p50 / p99 (raw same budget: 65-96 / 138-254 ms) | 69-84 / 286-335 ms | 70-102 / 292-363 ms |
    | hot client CPU per lock (raw same budget: 73-133 µs) | 92-116 µs | 95-121 µs |
    | uniform / raw same budget | 1.05 / 1.17 / 1.31x | 0.98 / 1.01 / 1.25x |
    | uniform / raw on demand | 1.43 / 1.60 / 1.60x | 1.31 / 1.42 / 1.67x |

    Every row ran about twice as fast as the night before on this (freshly started)
    machine, raw's as much as ours: 10,000 hot locks/s where 4,758-6,451 were, ~100 µs of
    client CPU per lock where ~200 were. The medians moved the right way, inside the
    rounds' spread. **Hot at the budget: 0.88x by the median, the 0.9x target still not
    shown**; client CPU per lock is raw's now, and what is left is the tail: p99 about
    1.6x raw same budget's.
    Is the rest the one connection of each replica's 7 that the shared session takes,
    leaving the waits 6 where raw's have 7? A raw row with one connection fewer
    (` + "`raw budget less one`" + `, 6 per replica, 120 in all) beside the two, 2 runs of 3 rounds
    (` + "`" + `-shared-impls "raw same budget,raw budget less one,advisory at budget"` + "`" + `, otherwise
    as above, 09:15-09:35 UTC; the first round of the second run had a 20 s test run
    beside it, which slowed raw same budget to 6,988 locks/s: left out): raw with 6 ran
    at 0.88 / 1.03 / 1.09x raw with 7, p99 143-204 ms. The connection is not it. At the
    budget, these runs: 0.85-0.99x raw same budget, 0.83 / 0.95 / 1.01x raw with 6; over
    all 11 rounds since the change (4 runs), **0.81 / 0.89 / 1.27x** raw same budget.
    The p99 stays the difference: 240-349 ms at the budget against 143-230 ms for both
    raw rows.
    Tried and not kept: letting up to 8 sessions of one key per process exist at once
    (` + "`gateSlots`" + ` 8, not 2), so that a replica's second and third Lock of a hot key join
    the server's queue at once, as raw's callers do, instead of waiting in the process
    for the first to be granted. One run of 3 rounds (09:36-09:44 UTC, as above):
    0.81 / 0.85 / 0.85x raw same budget, p99 304-356 ms. No better; but the reading
    drawn from it then, that the tail was not the queue in the process, was wrong:
    ` + "`gateSlots`" + ` bounds the sessions of a key, and the gate's other rule, one call of a
    key waiting on the server per process, stayed, so the third Lock still waited in the
    process.
    **The tail was the queue's second wait** (issue 47, 1d456ec). A Lock queued in the
    process behind another of its key asks for a connection only once that one has the
    lock, and at the budget it then went to the back of the pool's queue, behind every
    call that asked meanwhile: it waited for a connection twice. Builds switched by an
    environment variable (scratch, not committed), each beside the default in the same
    runs (2026-11-30 10:49-11:27 UTC, nothing else running): no queue in the process at
    all, 0.74 / 0.97 / 1.29x raw same budget and p99 200-259 ms over 9 rounds; two calls of
    a key waiting on the server at once, 0.86 / 0.90 / 0.93x and p99 230-264 ms over 3.
    Both give up the two-connection bound of the queue. What was kept keeps it: the calls
    that wait while the Manager's sessions pin every connection are served in the order
    they began, not the order they asked (` + "`reserve`" + `, ` + "`connWait`" + `), so a call's time in
    the queue keeps its place. Two runs of 3 rounds, the pool's order and the calls' order
    alternated in one binary (` + "`" + `-shared-impls "raw same budget,advisory at budget,..."` + "`" + `, 11:14-11:27 and
    11:52-12:04 UTC), then two runs of the commit itself beside raw same budget and raw on
    demand (11:31-11:54 UTC), nothing else running; min / median / max of per-round
    ratios:

    | hot, at the budget | the pool's order (before) | the calls' order (after) | raw same budget |
    |---|---|---|---|
    | locks/s / raw same budget, the alternated runs (6 rounds) | 0.80 / 0.95 / 1.10x | 0.86 / **1.04** / 1.27x | 1 |
    | after / before, round by round (6 rounds) | | 1.08 / **1.10** / 1.15x | |
    | locks/s / raw same budget, all 12 rounds of the calls' order | | 0.74 / **0.95** / 1.27x | 1 |
    | locks/s / raw on demand (the commit's 6 rounds) | | 0.93 / 1.11 / 1.92x | |
    | p50 (before: its 6 rounds; after and raw: 12) | 77-89 ms | 79-108 ms | 67-102 ms |
    | p99 | 316-401 ms (median 353) | **189-270 ms** (median 235) | 171-270 ms (median 203) |
    | client CPU per lock | 103-128 µs | 87-116 µs | 84-147 µs |

    The calls' order beat the pool's in every one of the 6 rounds that ran both. **Hot at
    the budget: 0.95x raw same budget by the median of 12 rounds, the 0.9x target met**,
    with a p99 within raw's range (its median 1.16x raw's) and a p50 about 1.1x raw's:
    first come first served across a replica's waits for a connection moves time from the
    tail to the middle, as raw's single queue does. The direct cycle did not move
    (BenchmarkCycleRatio, one core, 4 runs of each build alternated, 12:05 UTC: Lock +
    Unlock 1.036-1.071x raw before, 1.020-1.060x after). Then, while calls wait for a
    connection, an emptied shared session goes back at once instead of resting 100 ms
    (a call already waiting when it emptied waited out the rest): one run of 3 rounds,
    that build beside the resting one in one binary (12:23-12:34 UTC): 1.05x, 1.00x and
    1.03x of it round by round, 0.80 / 0.92 / 1.04x raw same budget, p99 175-235 ms
    (raw same budget 168-193 ms). Uniform, one run of 3 rounds of 96004a7 beside raw
    (12:57-13:05 UTC; not alternated with the build before): 1.54 / 1.64 / 1.93x raw same
    budget (the last run before these changes: 1.05 / 1.17 / 1.31x), p50 9-14 ms and p99
    149-185 ms against raw same budget's 65-67 ms and 316-356 ms.
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
