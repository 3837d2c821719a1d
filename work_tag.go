package advisory

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// workTag returns the holding's tag, made on first use.
func (p *pin) workTag() string { return p.tag.get(p.workPrefix, p.pid) }

// A lazyTag is a holding's work tag, made on first use: every kind of footing keeps
// its tag in one.
type lazyTag struct {
	once sync.Once
	tag  string
}

// get returns the tag: prefix's, then the holder part for the backend pid.
func (w *lazyTag) get(prefix func() string, pid uint32) string {
	w.once.Do(func() { w.tag = prefix() + holderTag(pid) })
	return w.tag
}

// holderTag is the holder part of a work tag: the holding backend's pid, a dot, and a
// nonce of six base-36 digits.
func holderTag(pid uint32) string {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	nonce := strconv.FormatUint(binary.LittleEndian.Uint64(b[:])%nonceSpace+nonceSpace, 36)[1:]
	return strconv.FormatUint(uint64(pid), 36) + "." + nonce
}

// nonceSpace is 36^6: six base-36 digits (formatted with a leading 1, then dropped, so
// that leading zeros stay).
const nonceSpace = 36 * 36 * 36 * 36 * 36 * 36

// workPrefix is the part of the tag that every holding of the lock shares.
func (p *pin) workPrefix() string { return tagPrefix(p.dbOID, p.key, p.pair) }

// tagPrefix is the work tag's part for a lock, in the database dbOID.
func tagPrefix(dbOID uint32, key Key, pair bool) string {
	k := strconv.FormatUint(uint64(key), 36)
	if pair {
		k = "p" + k
	}
	return "pgadv/" + strconv.FormatUint(uint64(dbOID), 36) + "/" + k + "/"
}

// pooledMark ends the holder part of a tag given to work that may reach its server
// through a transaction pooler ("PID.NONCE.t"): there the tag is set on a pooled server
// connection and stays on it after the work, when other clients run there (PgBouncer
// sets a client's application_name on each server connection it links and never undoes
// it in transaction mode). A drain trusts such a tag only on a session that runs a
// transaction begun before the drain (see drainer.candidate).
const pooledMark = ".t"

// holderOf returns the holder part of a tagged application_name ("PID.NONCE", without
// the pooled mark), the holder's pid, and whether the tag carries the pooled mark; ok is
// false if app carries no well-formed tag with the prefix.
func holderOf(app, prefix string) (holder string, pid uint32, pooled, ok bool) {
	i := strings.Index(app, prefix)
	if i < 0 {
		return "", 0, false, false
	}
	holder, _, _ = strings.Cut(app[i+len(prefix):], " ")
	holder, pooled = strings.CutSuffix(holder, pooledMark)
	p, nonce, found := strings.Cut(holder, ".")
	n, err := strconv.ParseUint(p, 36, 32)
	if !found || err != nil || nonce == "" || strings.Contains(nonce, ".") {
		return "", 0, false, false
	}
	return holder, uint32(n), pooled, true
}

// heldOnServer asks the server, on a new work connection's own session (pg), whether the
// lock's session still holds the lock; an error wrapping ErrLockLost if not. A drain
// finds only sessions that have finished starting, so a work connection that was still
// starting when the lock was lost, and the next holder drained, would escape it, and
// this process may hear of the loss after the connection is up. Asked from the new
// session, the server's answer closes that gap: if the lock was still held when the
// connection asked, the connection was already visible to every later drain. (A lock
// this process released is caught by the Lock's own state, read after this answer:
// Unlock ends the Lock before its connection can hold the key for anyone else.) The same
// statement gives the session the work settings where it reaches its backend directly
// (see workSetSQL), and there drops the pooled mark from its tag (see workUnmarkSQL).
func (p *pin) heldOnServer(ctx context.Context, pg *pgconn.PgConn, key Key, pair bool) error {
	return p.heldOnServerTagged(ctx, pg, key, pair, "")
}

// heldOnServerTagged is heldOnServer for a work connection of the holding whose plain
// tag is tag: the same round trip drops the pooled mark from its application_name where
// it reaches its backend directly (see workUnmarkSQL); tag "" leaves it alone.
func (p *pin) heldOnServerTagged(ctx context.Context, pg *pgconn.PgConn, key Key, pair bool, tag string) error {
	classid, objid, subid := pgLocksKey(key, pair)
	q := func(n uint64) string { return " OPERATOR(pg_catalog.=) '" + strconv.FormatUint(n, 10) + "'" }
	set := workSettings(&p.m.set, serverVersion(pg.ParameterStatus("server_version")))
	rows, err := pg.Exec(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_locks "+
		"WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND granted AND pid"+q(uint64(p.pid))+
		" AND database"+q(uint64(p.dbOID))+" AND classid"+q(uint64(classid))+" AND objid"+q(uint64(objid))+
		" AND objsubid"+q(uint64(subid))+"), "+workSetSQL(set, pg.PID())+", "+workUnmarkSQL(tag, pg.PID())).ReadAll()
	var row [][]byte
	if err == nil {
		row, err = onlyRow(rows, 3, "the work connection's check")
	}
	switch {
	case err != nil:
		return fmt.Errorf("ask the server whether the lock is held: %w", err)
	case string(row[0]) != "t":
		return fmt.Errorf("%w: the server this connection reached shows the lock's session (backend pid %d) "+
			"not holding it (lost, or another server: work tags work only on the lock's server)", ErrLockLost, p.pid)
	}
	return nil
}

// workUnmarkSQL is a select-list item that drops the pooled mark (see pooledMark) from
// the tag (a holding's plain tag, made of [a-z0-9/.]) in the session's application_name,
// only if the session's backend is pid: a connection that reaches its backend directly
// keeps that session for its whole life, so its tag cannot outlive it, and a drain
// trusts it whatever the session does (also idle). WorkConfig starts every connection
// with the mark, since it cannot know before connecting.
func workUnmarkSQL(tag string, pid uint32) string {
	if tag == "" {
		return "NULL"
	}
	return `(SELECT pg_catalog.set_config('application_name', pg_catalog.replace(
    pg_catalog.current_setting('application_name'), '` + tag + pooledMark + `', '` + tag + `'), false)
  WHERE pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) ` + strconv.FormatUint(uint64(pid), 10) + `)`
}
