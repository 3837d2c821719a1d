package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// partitionLab is a network namespace joined to the host by a veth pair. Holders run
// inside it and reach the server at serverIP; nftables rules inside the namespace drop
// every packet both ways, which is a silent partition: no FIN, no RST, no ICMP.
type partitionLab struct {
	ns, hostIf, nsIf         string
	serverIP, clientIP, cidr string
	partitioned              bool
}

func newPartitionLab() (*partitionLab, error) {
	if err := pgtest.CanPartition(); err != nil {
		return nil, err
	}
	clearStaleLabs()
	pid := os.Getpid()
	subnet, err := pgtest.FreeSubnet(pid)
	if err != nil {
		return nil, err
	}
	lab := &partitionLab{
		ns: fmt.Sprintf("advp%d", pid), hostIf: fmt.Sprintf("advh%d", pid), nsIf: fmt.Sprintf("advc%d", pid),
		serverIP: fmt.Sprintf("10.231.%d.1", subnet), clientIP: fmt.Sprintf("10.231.%d.2", subnet),
		cidr: fmt.Sprintf("10.231.%d.0/30", subnet),
	}
	steps := [][]string{
		{"ip", "netns", "add", lab.ns},
		{"ip", "link", "add", lab.hostIf, "type", "veth", "peer", "name", lab.nsIf},
		{"ip", "link", "set", lab.nsIf, "netns", lab.ns},
		{"ip", "addr", "add", lab.serverIP + "/30", "dev", lab.hostIf},
		{"ip", "link", "set", lab.hostIf, "up"},
		{"ip", "netns", "exec", lab.ns, "ip", "addr", "add", lab.clientIP + "/30", "dev", lab.nsIf},
		{"ip", "netns", "exec", lab.ns, "ip", "link", "set", lab.nsIf, "up"},
		{"ip", "netns", "exec", lab.ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := pgtest.RunTool(s...); err != nil {
			lab.close()
			return nil, err
		}
	}
	return lab, nil
}

// clearStaleLabs deletes the namespaces and veth ends of labs whose test process is gone
// (a run killed before its cleanup): they would otherwise keep their addresses and routes,
// and a later run could collide with them.
func clearStaleLabs() { pgtest.ClearStaleNets("advp", "advh") }

// partition drops every packet in and out of the namespace.
func (l *partitionLab) partition() error {
	nft := []string{"ip", "netns", "exec", l.ns, "nft"}
	for _, rule := range []string{
		"add table inet advpart",
		"add chain inet advpart in { type filter hook input priority 0 ; policy drop ; }",
		"add chain inet advpart out { type filter hook output priority 0 ; policy drop ; }",
	} {
		if err := pgtest.RunTool(append(nft, strings.Fields(rule)...)...); err != nil {
			return err
		}
	}
	l.partitioned = true
	return nil
}

func (l *partitionLab) heal() error {
	if !l.partitioned {
		return nil
	}
	l.partitioned = false
	return pgtest.RunTool("ip", "netns", "exec", l.ns, "nft", "delete", "table", "inet", "advpart")
}

func (l *partitionLab) close() {
	pgtest.RunTool("ip", "netns", "del", l.ns) // removes the veth pair too
	pgtest.RunTool("ip", "link", "del", l.hostIf)
}

// TestPartitionHolderIsToldBeforeTheServerFreesTheLock partitions holders from the server
// and measures, for each, (a) when its Done closed and (b) when another session could
// take its lock. a < b in every run is the library's core safety property.
func TestPartitionHolderIsToldBeforeTheServerFreesTheLock(t *testing.T) {
	needNet(t, netLab != nil, labErr, true)
	networkLane.join(t)
	dsn(t)
	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("ADVISORY_PARTITION_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	var results []partitionResult
	for r := 0; r < rounds; r++ {
		results = append(results, partitionRound(t, r)...)
	}
	summarize(t, results)
}

type partitionResult struct {
	profile     string
	told, freed time.Duration // after the partition began
	bounds      advisory.Bounds
}

func partitionRound(t *testing.T, round int) []partitionResult {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	t.Logf("round %d seed %d", round, seed)
	holderDSN := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", netLab.serverIP, srv.Port())
	type holder struct {
		h       *helper
		profile string
		key     advisory.Key
	}
	var holders []holder
	for _, p := range []struct {
		name string
		n    int
	}{{"default", 3}, {"tight", 4}} {
		for i := 0; i < p.n; i++ {
			// Stagger the holders so their keepalive timers are at different phases.
			time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			name := fmt.Sprintf("%s/%d/%s/%d", t.Name(), round, p.name, i)
			h := startHelper(t, "holder", map[string]string{"ADVISORY_FAULT_DSN": holderDSN,
				"ADVISORY_FAULT_KEY": name, "ADVISORY_FAULT_PROFILE": p.name}, "ip", "netns", "exec", netLab.ns)
			locked := h.expect(t, "LOCKED", 30*time.Second)
			pid, _ := strconv.Atoi(strings.Fields(locked.text)[1])
			key := advisory.KeyOf(name)
			require.EqualValues(t, pid, holderOf(t, key), "the holder process's backend holds %q", name)
			holders = append(holders, holder{h, p.name, key})
		}
	}
	time.Sleep(time.Duration(rng.IntN(2000)) * time.Millisecond)
	t0 := time.Now()
	require.NoError(t, netLab.partition())
	defer netLab.heal()

	results := make([]partitionResult, len(holders))
	var wg sync.WaitGroup
	for i, h := range holders {
		results[i] = partitionResult{profile: h.profile, bounds: boundsOf(t, h.profile)}
		wg.Add(2)
		go func() {
			defer wg.Done()
			lost := h.h.expect(t, "LOST", 60*time.Second)
			results[i].told = lost.at.Sub(t0)
			assert.Contains(t, lost.text, "lock lost: the network went silent past the keepalive limit", "the loss is classified")
		}()
		go func() {
			defer wg.Done()
			results[i].freed = waitFreed(t, h.key, 60*time.Second).Sub(t0)
		}()
	}
	wg.Wait()
	require.NoError(t, netLab.heal())
	return results
}

// waitFreed polls, from outside the partition, until another session can take key; it
// releases it again and returns when it got it.
func waitFreed(t *testing.T, key advisory.Key, timeout time.Duration) time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for {
		var ok bool
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&ok))
		if ok {
			at := time.Now()
			require.NoError(t, conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(key)).Scan(&ok))
			return at
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func boundsOf(t *testing.T, profile string) advisory.Bounds {
	m := newManager(t, "", profiles[profile]...)
	return m.Bounds()
}

func summarize(t *testing.T, results []partitionResult) {
	byProfile := map[string][]partitionResult{}
	for _, r := range results {
		byProfile[r.profile] = append(byProfile[r.profile], r)
		assertPartitionBounds(t, r)
	}
	for p, rs := range byProfile {
		margins := make([]float64, len(rs))
		for i, r := range rs {
			margins[i] = (r.freed - r.told).Seconds()
		}
		sort.Float64s(margins)
		t.Logf("%s: %d holders, margin min %+.2fs median %+.2fs max %+.2fs", p, len(rs), margins[0], margins[len(margins)/2], margins[len(margins)-1])
	}
}

// assertPartitionBounds logs one holder's figures and asserts the ordering and the bounds.
func assertPartitionBounds(t *testing.T, r partitionResult) {
	t.Helper()
	b := r.bounds
	t.Logf("%-7s told %6.2fs  freed %6.2fs  margin %+6.2fs  (bounds: told <= %v, freed in [%v, %v])",
		r.profile, r.told.Seconds(), r.freed.Seconds(), (r.freed - r.told).Seconds(), b.HolderTold, b.ServerFreesAfter, b.ServerFreesBy)
	assert.Less(t, r.told, r.freed, "the holder must be told before the server frees its lock")
	assert.LessOrEqual(t, r.told, b.HolderTold+1500*time.Millisecond, "told within the client bound")
	assert.GreaterOrEqual(t, r.freed, b.ServerFreesAfter-500*time.Millisecond, "not freed before the server bound")
	assert.LessOrEqual(t, r.freed, b.ServerFreesBy+2*time.Second, "freed within the server bound")
}

// TestInvertedSettingsAreRefused: settings under which the server could free a lock
// before its holder is told never get as far as a connection.
func TestInvertedSettingsAreRefused(t *testing.T) {
	_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 sslmode=disable",
		advisory.WithClientKeepalive(advisory.TCPKeepalive{Idle: 4 * time.Second, Interval: time.Second, Count: 3}),
		advisory.WithServerKeepalive(advisory.TCPKeepalive{Idle: 2 * time.Second, Interval: time.Second, Count: 3}))
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
}

// TestPartitionLabAvoidsLeftovers: a lab left by a killed run (its process gone) is
// cleared, and a subnet that an address on this host uses is never chosen, so one killed
// run cannot make the next one's partition tests time out.
func TestPartitionLabAvoidsLeftovers(t *testing.T) {
	needNet(t, netLab != nil, labErr, false)
	dead := 4_000_000 + rand.IntN(100_000) // a pid no process has: a run that is gone
	for syscall.Kill(dead, 0) != syscall.ESRCH {
		dead = 4_000_000 + rand.IntN(100_000)
	}
	ns, host, peer := fmt.Sprintf("advp%d", dead), fmt.Sprintf("advh%d", dead), fmt.Sprintf("advc%d", dead)
	pid := 4_100_000 + rand.IntN(100_000)
	want, err := pgtest.FreeSubnet(pid)
	require.NoError(t, err)
	for _, s := range [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns},
		{"ip", "addr", "add", fmt.Sprintf("10.231.%d.1/30", want), "dev", host},
	} {
		require.NoError(t, pgtest.RunTool(s...))
	}
	t.Cleanup(func() { pgtest.RunTool("ip", "netns", "del", ns); pgtest.RunTool("ip", "link", "del", host) })

	got, err := pgtest.FreeSubnet(pid)
	require.NoError(t, err)
	assert.NotEqual(t, want, got, "a subnet in use on this host is skipped")

	clearStaleLabs()
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(links), host, "the dead run's veth end is gone")
	spaces, err := exec.Command("ip", "netns", "list").Output()
	require.NoError(t, err)
	assert.NotContains(t, string(spaces), ns, "the dead run's namespace is gone")
	assert.Contains(t, string(spaces), netLab.ns, "this run's own namespace stays")
	again, err := pgtest.FreeSubnet(pid)
	require.NoError(t, err)
	assert.Equal(t, want, again, "the subnet is free again")
}
