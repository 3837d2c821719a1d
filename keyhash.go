package advisory

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Key is the 64-bit key of a PostgreSQL advisory lock: the bigint argument of
// pg_advisory_lock. In pg_locks it shows as classid (high 32 bits), objid (low 32 bits)
// and objsubid = 1.
type Key int64

// MaxNameLen is the longest lock name, in bytes, that [Manager.Lock] and [Manager.TryLock]
// accept. Names are meant for people and logs; a longer one is almost always a bug
// (a payload passed by mistake), so it is refused rather than hashed.
const MaxNameLen = 4096

// KeyOf returns the key for a lock name: the value PostgreSQL computes for
// hashtextextended(name, 0) on a little-endian server (x86-64, arm64), so that
// SELECT pg_advisory_lock(hashtextextended('migrations', 0)) in psql takes the same lock
// as Lock(ctx, "migrations"). KeyOf never fails and does not validate: it hashes the bytes
// of name as they are. [ValidateName] says whether the name is one the Manager accepts.
//
// The mapping is fixed: changing it would break mutual exclusion between versions.
func KeyOf(name string) Key {
	return Key(hashBytesExtended(name, 0))
}

// ValidateName returns nil if name can be used as a lock name, else an error wrapping
// [ErrInvalidKey] that says why: it is empty, longer than [MaxNameLen] bytes, not valid
// UTF-8, or contains a NUL byte (PostgreSQL text can hold neither of the last two, so no
// psql session could take the same lock).
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty name", ErrInvalidKey)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: name is %d bytes, the limit is %d", ErrInvalidKey, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: name is not valid UTF-8 (at byte %d)", ErrInvalidKey, invalidUTF8At(name))
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: name contains a NUL byte (at byte %d)", ErrInvalidKey, strings.IndexByte(name, 0))
	}
	return nil
}

func invalidUTF8At(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		}
	}
	return -1
}

// hashBytesExtended is Bob Jenkins' lookup3 hash as PostgreSQL's hash_bytes_extended
// computes it on a little-endian machine: 32-bit words read little-endian, the seed mixed
// in as an extra 12-byte block, the result b<<32 | c.
func hashBytesExtended(k string, seed uint64) uint64 {
	a := 0x9e3779b9 + uint32(len(k)) + 3923095
	b, c := a, a
	if seed != 0 {
		a += uint32(seed >> 32)
		b += uint32(seed)
		a, b, c = mix(a, b, c)
	}
	for len(k) >= 12 {
		a += le32(k[0:4])
		b += le32(k[4:8])
		c += le32(k[8:12])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The tail: up to 11 bytes; the lowest byte of c is never filled (lookup3 reserves it).
	for i := 0; i < len(k); i++ {
		v := uint32(k[i])
		switch {
		case i < 4:
			a += v << (8 * i)
		case i < 8:
			b += v << (8 * (i - 4))
		default:
			c += v << (8 * (i - 7))
		}
	}
	_, b, c = final(a, b, c)
	return uint64(b)<<32 | uint64(c)
}

func le32(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// mix is lookup3's mix(a, b, c), as PostgreSQL's hash_bytes_extended runs it.
func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= bits.RotateLeft32(c, 4)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 6)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 8)
	b += a
	a -= c
	a ^= bits.RotateLeft32(c, 16)
	c += b
	b -= a
	b ^= bits.RotateLeft32(a, 19)
	a += c
	c -= b
	c ^= bits.RotateLeft32(b, 4)
	b += a
	return a, b, c
}

// final is lookup3's final(a, b, c), as PostgreSQL's hash_bytes_extended runs it.
func final(a, b, c uint32) (uint32, uint32, uint32) {
	c ^= b
	c -= bits.RotateLeft32(b, 14)
	a ^= c
	a -= bits.RotateLeft32(c, 11)
	b ^= a
	b -= bits.RotateLeft32(a, 25)
	c ^= b
	c -= bits.RotateLeft32(b, 16)
	a ^= c
	a -= bits.RotateLeft32(c, 4)
	b ^= a
	b -= bits.RotateLeft32(a, 14)
	c ^= b
	c -= bits.RotateLeft32(b, 24)
	return a, b, c
}

// String returns the key in decimal, as pg_advisory_lock takes it.
func (k Key) String() string { return strconv.FormatInt(int64(k), 10) }

// quote quotes a lock name for messages, eliding the middle of very long ones.
func quote(name string) string {
	if len(name) > 80 {
		name = name[:40] + "…" + name[len(name)-20:]
	}
	return strconv.Quote(name)
}
