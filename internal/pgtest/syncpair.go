package pgtest

import (
	"context"
	"fmt"
	"time"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// SyncPair is a primary and its synchronous standby, two local clusters that trade places
// on every failover. Each node runs with synchronous_commit=on for every session,
// cluster_name set to its own name (which its walreceiver gives the primary as its
// application_name) and synchronous_standby_names naming the other node: a commit on the
// primary returns only once the standby has flushed it, and waits while the standby is
// down. The nodes keep their ports for the pair's life, so a multi-host connection string
// of both (in [SyncPair.DSN] order) stays valid through every failover.
//
// Its methods must not run concurrently with each other.
type SyncPair struct {
	nodes   [2]*pglocal.Cluster
	primary int // index of the node that is the primary
}

// syncNodeNames are the nodes' cluster_name, and so their application_name as standbys.
var syncNodeNames = [2]string{"sync_node0", "sync_node1"}

// StartSyncPair starts node 0 as the primary (initdb) and node 1 as its synchronous
// standby (pg_basebackup -R), and blocks until the standby streams synchronously, bounded
// by ctx and 60 s. Without the tools for a standby it returns an error wrapping
// [ErrUnavailable]. On error nothing is left.
func StartSyncPair(ctx context.Context) (*SyncPair, error) {
	bin, err := pglocal.FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	p := &SyncPair{}
	if p.nodes[0], err = pglocal.Start(ctx, pglocal.Options{Bin: bin, Settings: syncSettings(0)}); err != nil {
		return nil, err
	}
	err = checkStandbyTools(ctx, bin, p.nodes[0].DSN())
	if err == nil {
		p.nodes[1], err = pglocal.Start(ctx, pglocal.Options{Bin: bin, Settings: syncSettings(1),
			BaseBackupFrom: p.nodes[0].DSN()})
	}
	if err == nil {
		err = p.awaitSync(ctx)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func syncSettings(i int) []string {
	return []string{"synchronous_commit=on", "cluster_name=" + syncNodeNames[i],
		"synchronous_standby_names=" + syncNodeNames[1-i]}
}

// DSN returns the connection string of node i (0 or 1), whichever role it has now.
func (p *SyncPair) DSN(i int) string { return p.nodes[i].DSN() }

// PrimaryIndex returns the index of the node that is the primary now.
func (p *SyncPair) PrimaryIndex() int { return p.primary }

// PrimaryDSN returns the connection string of the node that is the primary now.
func (p *SyncPair) PrimaryDSN() string { return p.nodes[p.primary].DSN() }

// StandbyDSN returns the connection string of the node that is the standby now.
func (p *SyncPair) StandbyDSN() string { return p.nodes[1-p.primary].DSN() }

// StopStandby stops the standby (fast shutdown) and leaves it stopped: from then on every
// commit on the primary that must be replicated waits for it.
func (p *SyncPair) StopStandby() { p.nodes[1-p.primary].Stop() }

// CrashPrimary stops the primary with an immediate shutdown (SIGQUIT: no checkpoint, every
// session cut) and leaves it stopped.
func (p *SyncPair) CrashPrimary() { p.nodes[p.primary].Kill() }

// Promote starts the standby if it was stopped, promotes it, and makes it the primary of
// the pair; the old primary, which must be stopped ([SyncPair.CrashPrimary]), is then the
// standby, still down: [SyncPair.Rebuild] brings it back. It blocks until the new primary
// takes writes, bounded by ctx and 60 s. Its commits wait until the new standby is up.
func (p *SyncPair) Promote(ctx context.Context) error {
	next := p.nodes[1-p.primary]
	if err := next.Start(ctx); err != nil {
		return fmt.Errorf("pgtest: start the standby: %w", err)
	}
	sb := &Standby{srv: localServer(next, "standby"), primaryDSN: p.PrimaryDSN()}
	if err := sb.Promote(ctx); err != nil {
		return err
	}
	p.primary = 1 - p.primary
	return nil
}

// Rebuild makes the stopped standby a fresh copy of the primary (pg_basebackup -R: what
// the old primary committed that the new one never received is gone, as a failover
// manager's pg_rewind would also make it), starts it, and blocks until it streams
// synchronously, bounded by ctx and 60 s.
func (p *SyncPair) Rebuild(ctx context.Context) error {
	if err := p.nodes[1-p.primary].Follow(ctx, p.PrimaryDSN()); err != nil {
		return fmt.Errorf("pgtest: rebuild the standby: %w", err)
	}
	return p.awaitSync(ctx)
}

// awaitSync waits until the primary sees the standby streaming as its synchronous standby.
func (p *SyncPair) awaitSync(ctx context.Context) error {
	name := syncNodeNames[1-p.primary]
	err := poll(ctx, 60*time.Second, func() (bool, error) {
		var n int
		err := queryRow(ctx, p.PrimaryDSN(), `SELECT count(*) FROM pg_stat_replication
			WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'`, &n, name)
		return n == 1, err
	})
	if err != nil {
		return fmt.Errorf("pgtest: %s is not a synchronous standby: %w", name, err)
	}
	return nil
}

// Close stops both nodes and removes their files.
func (p *SyncPair) Close() error {
	var first error
	for _, n := range p.nodes {
		if n == nil {
			continue
		}
		if err := n.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
