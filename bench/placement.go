package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"
)

// A placement is where the client's threads and the server's processes may run. On a
// small machine a sub-millisecond round trip depends on it more than on anything the
// code does: client and backend on one core hand the CPU to each other; on two cores
// every message wakes the other core. Rows are measured in every placement, interleaved.
type placement struct {
	Name           string
	client, server []int // CPUs; nil: all of them
}

// placements returns the placements this machine has: unpinned (as users run it, the
// headline), one core for both, and, with two CPUs or more, client and server on
// different cores.
func placements() []placement {
	ps := []placement{{Name: "unpinned"}, {Name: "one core", client: []int{0}, server: []int{0}}}
	if runtime.NumCPU() >= 2 {
		ps = append(ps, placement{Name: "two cores", client: []int{1}, server: []int{0}})
	}
	return ps
}

// rowQuerier is what newPlacer asks for a backend's pid: a pgx.Conn or a pgxpool.Pool.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// choosePlacements returns the placements named in list (comma-separated), in the
// machine's order, or all of them for "". Unpinned must be among them: it is the headline.
func choosePlacements(list string) ([]placement, error) {
	all := placements()
	if strings.TrimSpace(list) == "" {
		return all, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []placement
	for _, pl := range all {
		if want[pl.Name] {
			out = append(out, pl)
			delete(want, pl.Name)
		}
	}
	if len(want) > 0 || len(out) == 0 || out[0].Name != "unpinned" {
		return nil, fmt.Errorf("-placements %q: choose among unpinned, one core, two cores (unpinned included)", list)
	}
	return out, nil
}

// placer moves the client's threads and the server's processes.
type placer struct {
	postmaster int
	current    string
}

// newPlacer finds the server's postmaster: the parent of a backend. It fails where the
// server's processes are not this machine's to move (a remote server, no permission).
func newPlacer(ctx context.Context, db rowQuerier) (*placer, error) {
	var pid int
	if err := db.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, err
	}
	pm, err := parentOf(pid)
	if err != nil {
		return nil, fmt.Errorf("find the postmaster: %w", err)
	}
	p := &placer{postmaster: pm}
	if err := p.place(placement{Name: "unpinned"}); err != nil {
		return nil, err
	}
	return p, nil
}

// place moves every client thread and every server process (the postmaster and all its
// children, backends included) to pl's CPUs. Threads started later inherit the mask.
func (p *placer) place(pl placement) error {
	if p == nil || p.current == pl.Name {
		return nil
	}
	tids, err := pids("/proc/self/task")
	if err != nil {
		return err
	}
	for _, tid := range tids {
		if err := setCPUs(tid, pl.client); err != nil {
			return fmt.Errorf("client thread %d: %w", tid, err)
		}
	}
	server, err := childrenOf(p.postmaster)
	if err != nil {
		return err
	}
	for _, pid := range append(server, p.postmaster) {
		// A backend may exit meanwhile (ESRCH): nothing to move.
		if err := setCPUs(pid, pl.server); err != nil && err != unix.ESRCH {
			return fmt.Errorf("server process %d: %w", pid, err)
		}
	}
	p.current = pl.Name
	return nil
}

func setCPUs(tid int, cpus []int) error {
	var set unix.CPUSet
	if cpus == nil {
		for i := 0; i < runtime.NumCPU(); i++ {
			set.Set(i)
		}
	}
	for _, c := range cpus {
		set.Set(c)
	}
	return unix.SchedSetaffinity(tid, &set)
}

// pids lists the numeric entries of a /proc directory.
func pids(dir string) ([]int, error) {
	es, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range es {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, n)
		}
	}
	return out, nil
}

// parentOf reads a process's parent pid from /proc/PID/stat.
func parentOf(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields follow its last ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return strconv.Atoi(f[1])
}

func childrenOf(parent int) ([]int, error) {
	all, err := pids("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range all {
		if pp, err := parentOf(pid); err == nil && pp == parent {
			out = append(out, pid)
		}
	}
	return out, nil
}
