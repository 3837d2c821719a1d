package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// runRole makes this process a lock holder that prints LOCKED and then waits to be killed.
func runRole(role string) int {
	ctx := context.Background()
	dsn, name := os.Getenv("BENCH_DSN"), os.Getenv("BENCH_KEY")
	var err error
	switch role {
	case "raw":
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, dsn); err == nil {
			_, err = c.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(advisory.KeyOf(name)))
		}
	case "advisory":
		var m *advisory.Manager
		if m, err = advisory.New(ctx, dsn); err == nil {
			_, err = m.Lock(ctx, name)
		}
	default:
		err = holdPeer(ctx, role, dsn, name)
	}
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("LOCKED")
	select {} // until SIGKILL
}

// holder starts a holder process in role for name and waits until it holds the lock.
func (b *bench) holder(role, name string) (*exec.Cmd, error) {
	cmd := exec.Command(b.self)
	cmd.Env = append(os.Environ(), roleEnv+"="+role, "BENCH_DSN="+b.dsn, "BENCH_KEY="+name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "LOCKED") {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("holder %s: %q %v", role, line, err)
	}
	return cmd, nil
}

// killTakeover measures from SIGKILL of a holder process to when wait (already waiting
// for the lock) returns.
func killTakeover(holder *exec.Cmd, waiting func() error, wait func() (time.Time, error)) (float64, error) {
	defer holder.Wait()
	if err := waiting(); err != nil {
		holder.Process.Kill()
		return 0, err
	}
	start := time.Now()
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	at, err := wait()
	return ms(at.Sub(start)), err
}

func rawKill(ctx context.Context, b *bench) (float64, error) {
	name := b.key("rawkill")
	h, err := b.holder("raw", name)
	if err != nil {
		return 0, err
	}
	k := int64(advisory.KeyOf(name))
	got := make(chan time.Time, 1)
	go func() { b.raw2.Exec(ctx, "SELECT pg_advisory_lock($1)", k); got <- time.Now() }()
	v, err := killTakeover(h, func() error { return b.waitWaiting(ctx, advisory.Key(k)) },
		func() (time.Time, error) { return <-got, nil })
	if err != nil {
		return 0, err
	}
	_, err = b.raw2.Exec(ctx, "SELECT pg_advisory_unlock($1)", k)
	return v, err
}

func oursKill(ctx context.Context, b *bench) (float64, error) {
	name := b.key("kill")
	h, err := b.holder("advisory", name)
	if err != nil {
		return 0, err
	}
	var l *advisory.Lock
	got := make(chan time.Time, 1)
	go func() { l, _ = b.m2.Lock(ctx, name); got <- time.Now() }()
	v, err := killTakeover(h, func() error { return b.waitWaiting(ctx, advisory.KeyOf(name)) },
		func() (time.Time, error) { return <-got, nil })
	if err != nil || l == nil {
		return 0, fmt.Errorf("takeover: %v", err)
	}
	return v, l.Unlock(ctx)
}

func tenThousand(prefix string) []string {
	ns := make([]string, 10000)
	for i := range ns {
		ns[i] = fmt.Sprintf("bench/%s/%d", prefix, i)
	}
	return ns
}

func session10k(ctx context.Context, b *bench) (float64, error) {
	ns := tenThousand(b.key("session"))
	s, err := b.m1.Session(ctx)
	if err != nil {
		return 0, err
	}
	v, err := timed(func() error { return s.LockAll(ctx, ns) })
	if cerr := s.Close(ctx); err == nil {
		err = cerr
	}
	return v, err
}

func conns100(ctx context.Context, b *bench) (float64, error) {
	m, err := advisory.New(ctx, b.dsn)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	name := b.key("conns")
	var most int32
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			most = max(most, m.Stat().AcquiredConns())
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for g := 0; g < 100; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				l, err := m.Lock(ctx, name)
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	return float64(most), firstErr
}

func memPerLock(ctx context.Context, b *bench) (float64, error) {
	ns := tenThousand(b.key("mem"))
	s, err := b.m1.Session(ctx)
	if err != nil {
		return 0, err
	}
	defer s.Close(ctx)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := s.LockAll(ctx, ns); err != nil {
		return 0, err
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ns)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(ns)), nil
}
