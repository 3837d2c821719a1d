package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pgadvisory/advisory"
)

// Issue 38's idle holdings (-shared-idle): -idle-procs processes each hold -idle-locks
// distinct locks at once, taken by as many goroutines together, and keep them. Measured:
// the server's client backends and the memory they add (PSS), the processes' memory
// (RSS), how long taking them took, and, once one session of the first process is
// terminated, how soon each holding on it is told.

type idleConfig struct {
	procs, locks int
	impl, docs   string
}

// idlePoint is one run of -shared-idle.
type idlePoint struct {
	Impl           string  `json:"impl"`
	Procs          int     `json:"procs"`
	Locks          int     `json:"locks_per_proc"`
	Holdings       int     `json:"holdings"`
	ServerConns    int     `json:"server_conns"`
	ServerAddedMB  float64 `json:"server_added_mb"`
	ClientRSSMB    float64 `json:"client_rss_mb"` // all processes
	TakeSeconds    float64 `json:"take_s"`        // from GO to every process holding all its locks
	OnTerminated   int     `json:"holdings_on_terminated_session"`
	ToldP50MS      float64 `json:"told_p50_ms"` // after pg_terminate_backend was sent
	ToldMaxMS      float64 `json:"told_max_ms"`
	SessionsPerPrc float64 `json:"sessions_per_proc"`
}

// idleSpec is what the parent asks of one idle process (JSON in idleSpecEnv).
type idleSpec struct {
	Impl  string
	Proc  int
	Locks int
}

const idleSpecEnv = "ADVISORY_BENCH_IDLE"

// runIdleChild is one idle process: on GO it takes its locks, prints "HELD <rss KB>
// <pid>:<holdings> ...", then "LOST <unix ns>" for each holding the moment it ends,
// until stdin closes.
func runIdleChild() int {
	var spec idleSpec
	if err := json.Unmarshal([]byte(os.Getenv(idleSpecEnv)), &spec); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx := context.Background()
	var opts []advisory.Option
	if spec.Impl == implShared {
		opts = append(opts, advisory.WithSharedSessions(sharedPerSession))
	}
	m, err := advisory.New(ctx, fmt.Sprintf("%s pool_max_conns=%d", os.Getenv("BENCH_DSN"), spec.Locks+1), opts...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer m.Close()
	fmt.Println("READY")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 1
	}
	ls := make([]*advisory.Lock, spec.Locks)
	errs := make([]error, spec.Locks)
	var wg sync.WaitGroup
	for i := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls[i], errs[i] = m.Lock(ctx, fmt.Sprintf("idle/%d/%d", spec.Proc, i))
		}()
	}
	wg.Wait()
	per := map[uint32]int{}
	for i, l := range ls {
		if errs[i] != nil {
			fmt.Println("ERROR", errs[i])
			return 1
		}
		per[l.PID()]++
	}
	var parts []string
	for pid, n := range per {
		parts = append(parts, fmt.Sprintf("%d:%d", pid, n))
	}
	sort.Strings(parts)
	var out sync.Mutex
	fmt.Println("HELD", rssKB(), strings.Join(parts, " "))
	for _, l := range ls {
		go func() {
			<-l.Done()
			at := time.Now().UnixNano()
			out.Lock()
			fmt.Println("LOST", at)
			out.Unlock()
		}()
	}
	for in.Scan() { // until the parent closes stdin
	}
	return 0
}

// rssKB is this process's resident set, in KiB.
func rssKB() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

// idleKid is one running idle process.
type idleKid struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startIdleKid(self, dsn string, spec idleSpec) (*idleKid, error) {
	cmd, in, out, err := spawn(self, "sharedidle", dsn, idleSpecEnv, spec)
	if err != nil {
		return nil, err
	}
	k := &idleKid{cmd: cmd, stdin: in, lines: make(chan string, 1<<14)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			k.lines <- sc.Text()
		}
		close(k.lines)
	}()
	return k, nil
}

func (k *idleKid) expect(prefix string) (string, error) {
	for line := range k.lines {
		switch {
		case strings.HasPrefix(line, prefix):
			return line, nil
		case strings.HasPrefix(line, "ERROR"):
			return "", fmt.Errorf("idle process: %s", line)
		}
	}
	return "", fmt.Errorf("idle process exited before %q", prefix)
}

func runIdle(ctx context.Context, ic idleConfig, self string, out io.Writer) error {
	conns := ic.procs*ic.locks + 50
	if ic.impl == implShared {
		conns = ic.procs*(min(ic.locks, 20)+ic.locks/50) + 50 // room for a burst's shared sessions: what it needs is measured
	}
	ms, err := startMetered(ctx, conns)
	if err != nil {
		return err
	}
	defer ms.Close()
	base := ms.meter.memory()
	kids := make([]*idleKid, 0, ic.procs)
	defer func() {
		for _, k := range kids {
			k.stdin.Close()
			k.cmd.Wait()
		}
	}()
	for p := range ic.procs {
		k, err := startIdleKid(self, ms.srv.DSN(), idleSpec{Impl: ic.impl, Proc: p, Locks: ic.locks})
		if err != nil {
			return err
		}
		kids = append(kids, k)
		if _, err := k.expect("READY"); err != nil {
			return err
		}
	}
	start := time.Now()
	for _, k := range kids {
		fmt.Fprintln(k.stdin, "GO")
	}
	pt := idlePoint{Impl: ic.impl, Procs: ic.procs, Locks: ic.locks, Holdings: ic.procs * ic.locks}
	var first []string
	for i, k := range kids {
		line, err := k.expect("HELD")
		if err != nil {
			return err
		}
		f := strings.Fields(line)
		rss, _ := strconv.ParseFloat(f[1], 64)
		pt.ClientRSSMB += rss / 1024
		if i == 0 {
			first = f[2:]
		}
	}
	pt.TakeSeconds = time.Since(start).Seconds()
	time.Sleep(time.Second) // settle: backends done starting
	if err := ms.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'
		AND pid <> pg_backend_pid()`).Scan(&pt.ServerConns); err != nil {
		return err
	}
	pt.ServerAddedMB = ms.meter.memory() - base
	pt.SessionsPerPrc = float64(pt.ServerConns) / float64(ic.procs)
	// The first process's busiest session is terminated: each holding on it is told.
	sort.Slice(first, func(i, j int) bool { return holdingsOf(first[i]) > holdingsOf(first[j]) })
	pid, _ := strconv.Atoi(strings.Split(first[0], ":")[0])
	pt.OnTerminated = holdingsOf(first[0])
	t0 := time.Now()
	if _, err := ms.admin.Exec(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return err
	}
	var told []float64
	for range pt.OnTerminated {
		line, err := kids[0].expect("LOST")
		if err != nil {
			return err
		}
		ns, _ := strconv.ParseInt(strings.Fields(line)[1], 10, 64)
		told = append(told, float64(time.Unix(0, ns).Sub(t0))/float64(time.Millisecond))
	}
	slices.Sort(told)
	pt.ToldP50MS, pt.ToldMaxMS = told[len(told)/2], told[len(told)-1]
	fmt.Fprintf(out, "idle: %s, %d processes × %d locks = %d holdings on %d server connections (%.1f per process); "+
		"server +%.0f MB (PSS), clients %.0f MB (RSS); taken in %.1f s; %d holdings on the terminated session told "+
		"p50 %.2f ms, max %.2f ms; %s\n", pt.Impl, pt.Procs, pt.Locks, pt.Holdings, pt.ServerConns, pt.SessionsPerPrc,
		pt.ServerAddedMB, pt.ClientRSSMB, pt.TakeSeconds, pt.OnTerminated, pt.ToldP50MS, pt.ToldMaxMS, machineLine())
	return writeShared(ic.docs, func(r *sharedResults) {
		r.Machine, r.Settings = machineLine(), ms.settings
		r.Idle = append(slices.DeleteFunc(r.Idle, func(p idlePoint) bool {
			return p.Impl == pt.Impl && p.Procs == pt.Procs && p.Locks == pt.Locks
		}), pt)
	})
}

// holdingsOf reads the count of "pid:count".
func holdingsOf(s string) int {
	_, n, _ := strings.Cut(s, ":")
	v, _ := strconv.Atoi(n)
	return v
}
