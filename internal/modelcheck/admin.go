package modelcheck

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
)

// What the calls ask of the server through the admin pool, beside the API under test.

// exclusiveHolder returns the backend of application app that holds key exclusively, or 0.
func exclusiveHolder(admin *pgxpool.Pool, key advisory.Key, app string) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := admin.Query(ctx, `
		SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.mode = 'ExclusiveLock'
		  AND l.classid = $1 AND l.objid = $2 AND a.application_name = $3`,
		uint32(uint64(key)>>32), uint32(key), app)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var pid uint32
	for rows.Next() {
		if err := rows.Scan(&pid); err != nil {
			return 0, err
		}
	}
	return pid, rows.Err()
}

// terminateAHolder terminates one of the backends of apps that hold an advisory lock,
// chosen by pick in [0, 1), or prefer if it is one. It returns 0 if there is none.
func terminateAHolder(admin *pgxpool.Pool, apps []string, pick float64, prefer uint32) (uint32, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := admin.Query(ctx, `
		SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = ANY($1) ORDER BY 1`, apps)
	if err != nil {
		return 0, err
	}
	var pids []uint32
	for rows.Next() {
		var pid uint32
		if err := rows.Scan(&pid); err != nil {
			return 0, err
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil || len(pids) == 0 {
		return 0, err
	}
	pid := pids[int(pick*float64(len(pids)))]
	if slices.Contains(pids, prefer) {
		pid = prefer
	}
	var ok bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok); err != nil {
		return 0, err
	}
	if !ok {
		return 0, nil // it exited meanwhile
	}
	return pid, nil
}

// holdsKey asks the server whether backend pid holds key (granted, in any mode).
func holdsKey(admin *pgxpool.Pool, pid uint32, key advisory.Key) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held bool
	err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1
		AND granted AND pid = $1 AND classid = $2 AND objid = $3)`,
		int32(pid), uint32(uint64(key)>>32), uint32(key)).Scan(&held)
	return held, err
}
