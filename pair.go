package advisory

import (
	"context"
	"strconv"
)

// Pair is a lock key in PostgreSQL's two-int4 form, pg_advisory_lock(Class, Object), for
// interoperating with code that locks that way. It is a key space of its own: the pair
// (0, 42) and the bigint key 42 are different locks (pg_locks shows objsubid = 2 for a
// pair, 1 for a bigint; classid = Class and objid = Object, as unsigned oids).
type Pair struct {
	Class, Object int32
}

// String returns "(Class,Object)".
func (p Pair) String() string {
	return "(" + strconv.Itoa(int(p.Class)) + "," + strconv.Itoa(int(p.Object)) + ")"
}

// key packs the pair as Class<<32 | Object: the same halves pg_locks shows.
func (p Pair) key() Key { return Key(int64(p.Class)<<32 | int64(uint32(p.Object))) }

func pairOf(k Key) Pair { return Pair{int32(k >> 32), int32(k)} }

// LockPair is [Manager.Lock] for a two-int4 key: pg_advisory_lock(p.Class, p.Object).
func (m *Manager) LockPair(ctx context.Context, p Pair) (*Lock, error) {
	return m.attempt(ctx, target{key: p.key(), pair: true}, modeLock)
}

// LockPairShared is [Manager.LockShared] for a two-int4 key.
func (m *Manager) LockPairShared(ctx context.Context, p Pair) (*Lock, error) {
	return m.attempt(ctx, target{key: p.key(), pair: true, shared: true}, modeLock)
}

// TryLockPair is [Manager.TryLock] for a two-int4 key.
func (m *Manager) TryLockPair(ctx context.Context, p Pair) (*Lock, error) {
	return m.attempt(ctx, target{key: p.key(), pair: true}, modeTry)
}

// TryLockPairShared is [Manager.TryLockShared] for a two-int4 key.
func (m *Manager) TryLockPairShared(ctx context.Context, p Pair) (*Lock, error) {
	return m.attempt(ctx, target{key: p.key(), pair: true, shared: true}, modeTry)
}

// HoldersPair is [Manager.Holders] for a two-int4 key.
func (m *Manager) HoldersPair(ctx context.Context, p Pair) ([]Holder, error) {
	return m.holders(ctx, false, p.key(), true)
}

// Pair returns the lock's key in the two-int4 form, and whether it was taken in that form.
func (l *Lock) Pair() (Pair, bool) { return pairOf(l.Key()), l.pairForm() }

// pairForm reports whether the lock is held in the two-int4 form.
func (l *Lock) pairForm() bool { return l.on.holds().pair }
