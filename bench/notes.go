package main

// notes closes docs/benchmarks.md: why the two harnesses' floors disagreed (issue 24),
// where a cycle's time goes, and what the rows measure. Written by hand, from the runs
// each paragraph names; the render writes it as it is.
const notes = `## Why two harnesses' floors disagreed (issue 24)

A harness written outside the project (a plain pgx.Conn running
` + "`select pg_try_advisory_lock($1)`" + ` and ` + "`select pg_advisory_unlock($1)`" + `, interleaved row by
row with Lock + Unlock and TryLock + Unlock on one Manager, 3,000 samples each after 200
warm-ups) measured the same library times as this bench but a floor 10-20 µs lower, so
ratios of 1.20-1.38x where this bench said 1.07-1.12x. That harness is now
` + "`cd bench && go run . -probe`" + ` (probe.go; ` + "`-probe-variants`" + ` adds the old floor,
` + "`-probe-shuffle`" + `, ` + "`-probe-warm`" + `, ` + "`-probe-placement`" + ` and ` + "`-probe-cpu`" + ` the
factors below, ` + "`-probe-cpuprofile`" + ` a pprof profile). What differed, measured with it:

- **Placement left over from pinned passes.** On this 2-vCPU VM a cycle takes about
  65 µs when the client thread and the backend share a CPU and 140-190 µs when every
  message has to wake the other vCPU; an unpinned median is a mix of the two, and the mix
  is decided by where the threads already are. The bench measured its unpinned rows in
  passes between pinned ones: threads let go after a pinned pass stay where it put them,
  so "unpinned" medians were the last placement's leftovers (the same code, measured
  unpinned only: 0.066 ms raw; with the rotation: 0.170-0.190 ms, in one sitting). The
  unpinned rows are now measured first, in every round, before anything is pinned: what
  a program that never calls sched_setaffinity sees.
- **Each sample after an untimed run of its own row.** No program runs each statement
  twice; it also made every row warm in a way a caller's rows are not. Gone: rows are
  timed back to back in a shuffled order, after 200 untimed passes.
- **What the floor sent.** The floor sent its key as a literal
  (` + "`SELECT pg_try_advisory_lock(42)`" + `), which no user writes; it now sends a name's
  key as ` + "`$1`" + `, as the outside harness and a user's program do (13 allocations per cycle
  instead of 9).
- **The outside harness's fixed order** (raw, Lock, TryLock) favours TryLock: it always
  follows Lock on the same pooled connection, whose backend has just run, while raw and
  Lock follow another backend. In one 20,000-sample run: raw 88.6 µs, Lock 96.2 µs
  (1.09x), TryLock 81.0 µs (0.91x). ` + "`-probe-shuffle`" + ` removes that bias; the bench's
  passes are shuffled.
- **One set of connections is one draw (found in stop 30).** Where a backend runs holds
  for hundreds of cycles at a time, per backend, and changes rarely: a row's median
  lands in the mode its own backend settled in. Split into draws (every draw new
  connections and new Managers, the same 3,000 samples in all), one run of the outside
  harness in 30 draws showed per-draw ratios of Lock + Unlock from 0.41x to 2.64x; with
  one draw, five runs in one sitting gave 0.97x, 1.02x, 1.07x, 1.14x and 1.19x. So did
  the two harnesses:
  each ran on one set of connections for its whole run (the bench's child and the bench's
  process, "0.105 ms against 0.170 ms" above, were two draws). Both now measure over
  many draws: the bench opens the cycles' connections again 4 times a round (20 draws in
  5 rounds), its child probe takes 20 (` + "`-probe-draws 20`" + `). Both tables show the
  median of the rows' ratios within each draw beside the ratio of the pooled medians: the
  first is paired (both rows timed in the same minutes, each on a fresh backend) and moves
  less between runs.
- **Rows that share a backend are favoured.** The outside harness ran Lock and TryLock on
  one Manager: its backend served two rows of three, the floor's one, and was more often
  still on its CPU when its next cycle came. With 20 draws, in shuffled order, Lock's
  per-draw median ratio was 1.02-1.08x in 13 runs with the shared Manager, and 1.09-1.11x
  in 3 runs once a fourth row (the literal-key floor) shared the floor's connection; with
  a Manager per row, 1.02-1.11x in 6 runs. Every cycle row now has a connection (raw) or a
  Manager of its own, in the bench and in the probe (` + "`-probe-one-manager`" + ` restores the
  issue's harness, which the report's first column still runs).
- **What remains is noise this machine cannot remove.** With draws and a connection per row,
  the two harnesses agree within a run's spread. Per-draw medians of separate runs in one
  sitting: Lock + Unlock 1.02-1.11x of raw pgx in the probe (6 runs) and 0.95-1.10x in the
  bench (3 runs); TryLock + Unlock 1.04-1.12x and 1.00-1.12x. Read a single run's ratio
  within ±0.05x-0.08x. The library's own work on the cycle is in the next section.
- **Other jobs on the machine (issue 47).** Pinned to one core while other jobs load the
  VM (load average 20-69), raw pgx's cycle took 0.2-1.9 ms instead of 0.15 ms, and a single
  run's one-core ratio ranged from 0.90x to 2.00x; at load 3-12, 0.96-1.23x. Only runs
  alternated build by build in the same minutes, many of them, say anything: see "A lock
  held as a transaction, through PgBouncer" for 19 such pairs.

## Where a cycle's time goes

The library's own work on a cycle, from a pprof CPU profile of the probe (20,000
interleaved samples per row, unpinned,
` + "`go run . -probe -probe-samples 20000 -probe-cpuprofile cycle.prof`" + `), client CPU on the caller's goroutine per cycle: raw pgx
36 µs, Lock + Unlock 44.5 µs, TryLock + Unlock 42 µs. The lock and unlock statements
themselves cost what raw pgx's do (35 µs against 36 µs). The 6-8.5 µs more:

- **The loss watcher, about 5 µs**: epoll_ctl ADD when the lock is held and DEL before
  the unlock statement (sockwatch.register/Remove; a system call costs about 2.5 µs on
  this VM), from the grant. From issue 24 to issue 47's sixth pass an armer
  (loss_armer.go, removed) registered a held session at its next tick, within 1 ms, only
  if it was still held, so that a cycle like this one made neither call; it went when its
  tick was found to cost more than the calls (see "The armer removed", at the end of "A
  lock held as a transaction, through PgBouncer"). When it came, measured with the probe, whose
  rows take turns cycle by cycle, ` + "`-probe -probe-cpu -probe-only \"advisory TryLock + Unlock\"`" + ` (5,000 cycles a row,
  three runs of each build, alternated): client CPU per cycle 88.8-97.8 µs before against
  raw pgx's 76.3-79.2 µs (1.12-1.28x), 72.1-78.5 µs after against 70.4-77.3 µs
  (1.01-1.04x); the backend's CPU fell too, from 62.8-66.4 µs (raw 53.4-64.3) to
  49.7-52.8 µs (raw 49.9-55.4), and the wall time from 1.14-1.17x raw to 0.98-1.01x. The
  price: a loss in a holding's first millisecond was seen up to a millisecond later.
  Until issue 47 the armer's goroutine parked after every tick, so the next Lock's queue
  woke it: a goroutine, and often a thread, woken per cycle. It then kept ticking after a
  tick that armed two sessions or more (a Manager taking locks faster than one per
  millisecond), and parked after one that armed fewer, as before. Direct cycle, one core,
  ` + "`-probe -probe-placement \"one core\" -probe-samples 4000`" + `, three runs of each build
  alternated, 2026-11-29, load average 8-25 (other jobs), two sessions of three runs:
  Lock + Unlock 1.09-1.14x of raw before, 1.09-1.13x after; TryLock + Unlock 1.08-1.12x
  before, 1.06-1.10x after. Within this machine's noise (the probe's rows take turns, so
  each Manager locks about once a millisecond, below the steady rate), and short of the
  1.07x issue 47 asked for Lock.
  From the second part of issue 47 (branch h47client) the armer's goroutine slept on one
  timer, not on a channel a Lock poked: the first holding queued set it, and the last to
  leave before the tick (Unlock, a handoff, a transaction) stopped it, so a lock released
  within the millisecond woke nothing (before, a Lock after a quiet tick woke the
  goroutine, and its tick woke it again a millisecond later). Steady traffic (a queue that
  set the timer within a millisecond of the last that did, or a tick that found two or
  more) kept the timer ticking through, one wake-up per millisecond rather than a timer
  set and stopped per Lock: setting a timer can itself wake an idle thread (the runtime
  hands a new earliest timer to a thread in the network poller; strace showed that
  eventfd write in about 0.1-0.9 of pooled cycles). That tick is what issue 47's sixth
  pass found costing a loop of Locks 0.15x on one core, and removed.
- **Timers per cycle (issue 47, h47client).** Behind a proxy (the heartbeat on by
  default) a Lock used to set two timers of its own besides the armer's: its wait's slice
  (a context.WithTimeout: a timer, and 11 of the cycle's 45 allocations with pgx's
  watching of that ctx) and the holding's heartbeat (time.AfterFunc at the grant, stopped
  at the Unlock). The heartbeat's timer started at the armer's tick, its first beat
  still a period after the grant, so that a holding released within the millisecond made
  none; without the armer it is armed at the grant again. The slices of a Manager's waits share one timer
  (pin_slices.go, sliceWatch): every slice has the same bound, so the timer is set for
  the oldest and a slice started meanwhile touches no timer; when it fires it interrupts
  the slices past their bound through their connections' cancel handlers
  (TestSliceWatchInterruptsAHungSliceAlone, TestSliceWatchNeverInterruptsAnEndedSlice;
  end to end, faults' TestHAProxyFrozenWaiter) and is set again for the oldest still
  running. A pooled cycle's allocations: 45 before, 44 after. Since issue 47's seventh
  pass a slice has no context of its own (it was a WithCancel child of the caller's,
  which pgx watched): it runs under the caller's ctx, and the timer interrupts its
  statement directly; 35 allocations a pooled Lock + Unlock before, 25 after (27 once the
  Unlock and a TryLock's try were watched the same way).
- **The pool and its liveness peek, about 2-2.75 µs**: pgxpool Acquire and Release, and
  ShouldPing's recvfrom(MSG_PEEK) (0.75 µs). It buys: an idle connection whose backend was
  terminated is found before a Lock meets its FATAL.
- **The pin, about 1 µs**: newPin's bookkeeping (state, statements, handle).

That is 0.06-0.09x of a 90-130 µs cycle; the rest of a gap between two unpinned medians
is where the scheduler put the threads (see above), which the one-core and two-core
columns hold fixed. The fleet's cost of names is another matter: see "Fleet" above.

- **Thread wake-ups**: the same as raw pgx. perf's sched_wakeup events over 20,000
  cycles (root package, ` + "`ADVISORY_BENCH_LAYER=raw|lock`" + ` with ` + "`-bench CycleAblation`" + `,
  call graphs): raw 1.79 per cycle, Lock + Unlock 1.86. The largest source in both is
  pgx itself: every statement resets a 15 ms "slow write" timer, and adding a timer while
  no thread waits in the network poller makes the runtime wake an idle thread (0.74 per
  cycle raw, 0.90 ours). No goroutine is started and no thread of ours is woken for a
  cycle: the loss watcher is an epoll registration, not a goroutine.
- **System calls**: three more than raw pgx (one, for a lock released within a
  millisecond, while the armer was there): epoll_ctl ADD when the lock is held
  and DEL before the unlock statement (the loss watcher), and one recvfrom(MSG_PEEK) when
  the pool hands out a connection (an idle connection whose backend was terminated
  already holds the FATAL; the peek finds it before a Lock meets it). Switching the
  watcher off altogether (an experiment, not an option) moved Lock + Unlock by 0.01x to
  0.04x; keeping one registration per connection and arming and disarming it with
  EPOLL_CTL_MOD instead measured no difference in two paired runs, so the simpler ADD/DEL
  stays. A registration that stayed armed would wake the watcher on every reply; one
  watching only for a hang-up would hear of a termination after the server has freed the
  lock (the FATAL comes first, the FIN after the release), so the holder would no longer
  be told first.
- **Server work**: on a connection proven direct (the backend sees our socket's own two
  ends; see docs/guarantees.md) the lock statements are the bare pg_advisory_* calls with
  one parameter, as raw pgx sends. Through a proxy or a Unix socket every lock statement
  also checks the connection's ownership token and returns pg_backend_pid(): measured
  interleaved on one plain connection, 3000 iterations, that check alone costs the server
  1.07-1.08x of a raw cycle (the token's current_setting and text parameter 1.07x, the pid
  column 1.02x).
- **Allocations**: 9 per named Lock or TryLock cycle and 5 by key (11 for either before the
  key's statements left pgx's query layer, pin_prepared.go; 44 and 47 before issue 14, 19
  before the statement-text cache and the peek on the setup's descriptor), 13 per Session
  Lock + Unlock (16 before; 38 before its unlock bound became a socket deadline). Raw pgx
  makes 9 to 12 for its own two statements, which ours include.
- **CPU work**: pool Acquire + Release about 1.3 µs (BenchmarkPoolAcquireRelease); the
  rest of the library's code is spread thin (no function of the library above 0.3 % of
  the client's CPU in perf profiles).

Compare a row across the placement columns: a gap that is the same in every placement is
work on the cycle's path, not where the threads ran. In the root package,
` + "`go test -run '^$' -bench CycleAblation -benchtime 3000x -count 4`" + ` (on an idle machine)
splits a Lock + Unlock cycle into layers, each timed side by side with the raw floor:
the raw statements on our pool connection (our session settings), those plus pool
Acquire and Release, the whole cycle (plus the pinned-session bookkeeping, the in-process
queue and the epoll registration), and, apart, the checked statement texts that a
proxied connection sends. Timings taken while other jobs load the machine mean little:
the load average at the start and the end of the run is printed above. On this 2-CPU
VM a 5-round run of the same code moves an unpinned ratio by up to 0.05x-0.08x even over
20 draws (see "Why two harnesses' floors disagreed"), and a pinned one by up to 0.05x:
read a single ❌ or ✅ near its target with that in mind.

## What the rows measure

- **Placements.** *unpinned*: as users run it, the scheduler decides (the headline).
  *one core*: every client thread and every server process (postmaster and backends) on
  CPU 0. *two cores*: client on CPU 1, server on CPU 0. The threads are moved between
  passes (sched_setaffinity), and the first sample after a move is dropped. Unpinned
  rows are measured before the first pinned pass (see "Why two harnesses' floors
  disagreed"). On a small
  machine a sub-millisecond round trip depends on placement more than on anything the
  code does: when client and backend share a core, each hands the CPU to the other;
  across cores every message has to wake the other core.
- **Floors.** ` + "`select pg_try_advisory_lock($1)`" + ` + ` + "`select pg_advisory_unlock($1)`" + `
  on a plain pgx connection held open, the key a name's (KeyOf), as a user's program
  sends them: two round trips, no pool, no loss detection; once with context.Background,
  once with a cancellable ctx created once (as a caller's request ctx), which pgx watches
  during each statement. **advisory Lock + Unlock** (a Manager with New's defaults, as
  a user's program) adds the pool (and its liveness peek), the in-process queue, the
  pinned-session bookkeeping and the loss watcher (an epoll registration); the
  benchmark's connections go straight to the server over loopback TCP, so its lock
  statements are the bare functions (see above for what a proxied connection adds).
  **Session Lock + Unlock** takes and releases one lock on a Session's connection, held
  open. Each cycle row has its own connection or Manager (no two rows share a backend).
  Unpinned rows: 600 samples a round (3,000 in 5 rounds) in 4 draws of 150, each on the
  rows' connections opened again, measured before any pinned pass; pinned rows: 200 a
  round, on the last draw's connections.
- **Handoff**: from the holder's unlock call to the waiter's lock call returning, the
  waiter already queued. Raw: a second connection blocked in pg_advisory_lock. Advisory:
  the waiter in another Manager (the remote-waiter bound: it waits on the server, as
  another process's would), and the waiter in the holder's own Manager (the local one:
  behind the Manager's per-key queue). Pollers
  (goose, lease tables) only notice at their next poll, so their handoff is spread over
  their polling period.
- **Loss detection**: from the pg_terminate_backend call to the holder being told. The raw
  floor is a bare WaitForNotification on an idle connection. Both are timed on a goroutine
  that waits for the news, not on the one that called pg_terminate_backend, whose reply
  often waits for the terminated backend's exit.
- **SIGKILL / crash takeover**: a holder process is killed while a waiter waits. Session
  locks are freed as soon as the kernel closes the socket; lease tables wait for the lease
  to expire, then for the waiter's next poll.
- **Peers** use their defaults: goose v3.29 lock package (session locker: polls every 5 s;
  table locker: 30 s lease, 5 s heartbeat and probe). The lease-table rows are the
  patterns blog posts describe, written for this benchmark with a 10 s lease, a 3 s
  heartbeat and a 1 s poll.
`

// cycleNotes follows the cycle table: where the cycle's later measurements are, which
// this command did not take.
const cycleNotes = `Issue 47's second pass on the client's share (h47client) was measured with
BenchmarkCycleRatio and BenchmarkCycleCounts, builds alternated, not by a run of this
table: see "A lock held as a transaction, through PgBouncer", after its last table. Its
sixth pass removed the loss watcher's armer, whose tick this table's rows, taking turns
cycle by cycle in one process, had shared with raw pgx's; a loop of Locks in blocks of
100 (BenchmarkSteadyCycleRatio) went from 1.24x raw to 1.08x on one core: see "The armer
removed", at the end of that section. This table was measured after that change.

`
