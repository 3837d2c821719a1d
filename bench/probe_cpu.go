package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU per cycle: the part of a cycle's cost that does not depend on where the scheduler
// put the threads. Each row runs in blocks (not interleaved: CPU time hardly drifts with
// the machine's state), and the run time of the client's threads and of the row's backend
// comes from /proc/*/schedstat (nanoseconds, exact, unlike rusage's ticks).

// probeCPU prints, per row, the client's and the backend's CPU time per cycle, blocks
// rounds of n cycles each, interleaved by block.
func probeCPU(ctx context.Context, out io.Writer, rows []*probeRow, blocks, n int) error {
	client, server, wall := make([]float64, len(rows)), make([]float64, len(rows)), make([]float64, len(rows))
	for b := 0; b < blocks; b++ {
		for i, r := range rows {
			pid, err := r.backend(ctx)
			if err != nil {
				return err
			}
			c0, s0, t0 := clientRunTime(), runTime(pid), time.Now()
			for k := 0; k < n; k++ {
				if err := r.op(ctx); err != nil {
					return err
				}
			}
			wall[i] += float64(time.Since(t0).Nanoseconds())
			client[i] += float64(clientRunTime() - c0)
			server[i] += float64(runTime(pid) - s0)
		}
	}
	total := float64(blocks * n * 1000)
	fmt.Fprintf(out, "CPU per cycle (%d blocks of %d cycles per row; /proc schedstat): client threads, the row's backend, wall\n", blocks, n)
	for i, r := range rows {
		fmt.Fprintf(out, "  %-62s client %5.1f µs  backend %5.1f µs  wall %6.1f µs\n", r.name, client[i]/total, server[i]/total, wall[i]/total)
	}
	return nil
}

// runTime returns a task's time on a CPU so far, in ns (first field of schedstat).
func runTime(pid int) int64 {
	return schedstat(fmt.Sprintf("/proc/%d/schedstat", pid))
}

func schedstat(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseInt(f[0], 10, 64)
	return v
}

// clientRunTime sums the run time of this process's threads (a thread that exited is
// lost: the Go runtime keeps its threads).
func clientRunTime() int64 {
	tids, _ := pids("/proc/self/task")
	var sum int64
	for _, t := range tids {
		sum += schedstat(fmt.Sprintf("/proc/self/task/%d/schedstat", t))
	}
	return sum
}
