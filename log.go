package advisory

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/pgadvisory/advisory/internal/goid"
)

// waitLogAfter is how long a Lock waits before the wait is logged with its holders.
const waitLogAfter = time.Second

func (p *pin) attrs(extra ...slog.Attr) []slog.Attr {
	a := []slog.Attr{slog.Int64("key", int64(p.key)), slog.Uint64("pid", uint64(p.pid))}
	if p.name != "" {
		a = append(a, slog.String("name", p.name))
	}
	if p.shared {
		a = append(a, slog.Bool("shared", true))
	}
	return append(a, extra...)
}

func (p *pin) log(level slog.Level, msg string, extra ...slog.Attr) {
	if l := p.m.set.logger; l != nil {
		logAttrs(l, level, msg, p.attrs(extra...)...)
	}
}

// logWaitLater arms the "waiting for lock" record for a Lock that is still waiting after
// waitLogAfter; the returned func disarms it, and once it has returned no record of this
// wait is written (a wait that ended as the record's holders were read would otherwise
// name its own grant as the holder).
func (p *pin) logWaitLater(ctx context.Context) func() bool {
	if p.m.set.logger == nil {
		return func() bool { return false }
	}
	w := &waitLog{start: time.Now(), g: goid.ID()}
	t := time.AfterFunc(waitLogAfter, func() { p.logWait(ctx, w) })
	return func() bool {
		w.mu.Lock()
		w.ended = true
		w.mu.Unlock()
		return t.Stop()
	}
}

// waitLog is one Lock's wait, as its record needs it: when it began, the goroutine that
// waits (see goid), and whether it has ended (under mu, held while the record is written).
type waitLog struct {
	start time.Time
	g     uint64
	mu    sync.Mutex
	ended bool
}

// selfWaitHint is the advice of the record of a Lock that waits for a holding of its
// own goroutine: the wait never ends.
const selfWaitHint = "held by this goroutine: the wait never ends; " +
	"a nested Lock must carry the holding's ctx (LockFromContext, ContextWithLock) to re-enter it"

// ownWaitHint is the advice of the Info record of a Lock that waits for another holding of
// its own Manager: ordinary contention between its callers, unless the caller runs under
// that holding (then in another goroutine than the one that took it).
const ownWaitHint = "held by this Manager: if this call runs under that holding, the wait never ends: " +
	"a nested Lock must carry the holding's ctx (LockFromContext, ContextWithLock) to re-enter it"

// holdersTimeout bounds the holders' query of a wait's record, and behind a transaction
// pooler poolTimeout: there the query needs a server connection of the pooler's pool,
// and one that cannot get any within it says the pool is full (see poolFullHint).
const (
	holdersTimeout = 5 * time.Second
	poolTimeout    = time.Second
)

// logWait records a Lock still waiting, with the lock's holders: Info; Warn with
// selfWaitHint if the holder is a holding this goroutine was given (a self-wait); Warn
// with poolFullHint if, behind a transaction pooler, the holders could not be read for
// want of a server connection (see poolerFull). Waits for another goroutine's holding of
// this Manager are ordinary contention: Info, with held_by_this_manager and ownWaitHint.
func (p *pin) logWait(ctx context.Context, w *waitLog) {
	pooled := p.m.proxy.txPooled.Load()
	bound := holdersTimeout
	if pooled {
		bound = poolTimeout
	}
	qctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	hs, err := p.m.holders(qctx, false, p.key, p.pair)
	var attrs []slog.Attr
	own := false
	for _, h := range hs {
		if h.Granted && (pooled || h.PID != p.pid) { // a pooled pin's pid is its last holding's
			attrs = append(attrs, slog.Group("holder", slog.Uint64("pid", uint64(h.PID)),
				slog.String("application_name", h.ApplicationName), slog.String("client", h.ClientAddr),
				slog.Time("since", h.Since)))
			own = own || p.m.ownsBackend(h.PID, p)
		}
	}
	if err != nil {
		attrs = append(attrs, slog.String("holders_error", err.Error()))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	attrs = append(attrs, slog.Duration("waited", time.Since(w.start).Round(time.Millisecond)))
	var poolerFull bool
	var full []slog.Attr
	if pooled && err != nil && qctx.Err() != nil && ctx.Err() == nil {
		poolerFull, full = p.m.poolerFull()
	}
	switch self, held := p.m.holdsKey(p, w.g); {
	case self:
		p.log(slog.LevelWarn, "advisory: waiting for a lock this Manager holds", append(attrs, slog.String("hint", selfWaitHint))...)
	case poolerFull:
		p.log(slog.LevelWarn, "advisory: waiting for a server connection of the pooler", append(attrs, full...)...)
	case own || held: // held also when the holders could not be read
		p.log(slog.LevelInfo, "advisory: waiting for lock", append(attrs, slog.Bool("held_by_this_manager", true),
			slog.String("hint", ownWaitHint))...)
	default:
		p.log(slog.LevelInfo, "advisory: waiting for lock", attrs...)
	}
}

// logAcquired records a granted lock (Debug), and the goroutine it was given to (see
// logWait).
func (p *pin) logAcquired(start time.Time) {
	if p.m.set.logger != nil {
		p.holderG.Store(goid.ID())
		p.log(slog.LevelDebug, "advisory: lock acquired", slog.Duration("waited", time.Since(start).Round(time.Microsecond)))
	}
}

// logEnd records how a session ended: a loss (Warn) or a release (Debug).
func (p *pin) logEnd(err error, heldSince time.Time) {
	if p.m.set.logger == nil {
		return
	}
	held := slog.Duration("held", time.Since(heldSince).Round(time.Microsecond))
	if errors.Is(err, ErrLockLost) {
		p.log(slog.LevelWarn, "advisory: lock lost", held, slog.String("cause", err.Error()))
		return
	}
	p.log(slog.LevelDebug, "advisory: lock released", held)
}
