// Package advotel records the lock metrics of an advisory.Manager with
// OpenTelemetry: pass Hooks(provider) to advisory.WithHooks. It is a module of its own, so
// that the OpenTelemetry dependencies stay out of the library's.
//
// Instruments (every one carries advisory.lock.mode, "exclusive" or "shared"):
//
//	advisory.lock.acquisitions   counter     Lock and TryLock calls, by advisory.lock.call
//	                                         ("lock", "try_lock") and advisory.lock.outcome
//	                                         ("acquired", "locked", "canceled",
//	                                         "pool_exhausted", "pooler", "standby", "closed",
//	                                         "error"): contention is outcome "locked" and
//	                                         the wait histogram; refusals are "pooler" and
//	                                         "standby"
//	advisory.lock.wait.duration  histogram s time in Lock and TryLock, same attributes
//	advisory.lock.hold.duration  histogram s how long locks were held, by advisory.lock.end
//	                                         ("released", or the loss's cause)
//	advisory.lock.losses         counter     locks lost, by advisory.lock.loss.cause
//	                                         ("terminated", "server_closed", "keepalive",
//	                                         "reset", "manager_closed", "connection_failed")
//	advisory.locks.held          updown      locks held now
//
// Lock names are not attributes unless WithLockNames is given: names are often
// unbounded (one per job, per tenant), and each distinct value is a new time series.
package advotel

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgadvisory/advisory"
)

// An Option configures Hooks.
type Option func(*config)

type config struct{ names bool }

// WithLockNames adds the lock's name as the advisory.lock.name attribute. Use it only
// when the set of names is small and fixed.
func WithLockNames() Option { return func(c *config) { c.names = true } }

type recorder struct {
	cfg          config
	cache        sync.Map // attrKey → metric.MeasurementOption
	acquisitions metric.Int64Counter
	wait         metric.Float64Histogram
	hold         metric.Float64Histogram
	losses       metric.Int64Counter
	held         metric.Int64UpDownCounter
}

// durationBuckets span a lock cycle on a LAN (0.1 ms) to a long migration wait (10 min).
var durationBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
	0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Hooks returns hooks that record the instruments above with a meter from mp. It fails
// only if mp refuses to create an instrument.
func Hooks(mp metric.MeterProvider, opts ...Option) (advisory.Hooks, error) {
	r := &recorder{}
	for _, o := range opts {
		o(&r.cfg)
	}
	meter := mp.Meter("github.com/pgadvisory/advisory")
	var err error
	if r.acquisitions, err = meter.Int64Counter("advisory.lock.acquisitions",
		metric.WithDescription("Lock and TryLock calls, by outcome"), metric.WithUnit("{call}")); err != nil {
		return advisory.Hooks{}, fmt.Errorf("advotel: %w", err)
	}
	if r.wait, err = meter.Float64Histogram("advisory.lock.wait.duration",
		metric.WithDescription("Time spent in Lock and TryLock calls"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return advisory.Hooks{}, fmt.Errorf("advotel: %w", err)
	}
	if r.hold, err = meter.Float64Histogram("advisory.lock.hold.duration",
		metric.WithDescription("How long locks were held"), metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(durationBuckets...)); err != nil {
		return advisory.Hooks{}, fmt.Errorf("advotel: %w", err)
	}
	if r.losses, err = meter.Int64Counter("advisory.lock.losses",
		metric.WithDescription("Held locks lost, by cause"), metric.WithUnit("{lock}")); err != nil {
		return advisory.Hooks{}, fmt.Errorf("advotel: %w", err)
	}
	if r.held, err = meter.Int64UpDownCounter("advisory.locks.held",
		metric.WithDescription("Locks held now"), metric.WithUnit("{lock}")); err != nil {
		return advisory.Hooks{}, fmt.Errorf("advotel: %w", err)
	}
	return advisory.Hooks{Acquired: r.acquired, NotAcquired: r.notAcquired, Ended: r.ended}, nil
}

// attrKey is one combination of attribute values; without lock names there are few, so
// each one's measurement option is built once and reused (building an attribute set
// sorts and hashes it: a cost worth avoiding on every lock cycle).
type attrKey struct {
	shared     bool
	name       string
	key, value string
	call       int8 // 0 none, 1 lock, 2 try_lock
}

func (r *recorder) opt(e advisory.LockEvent, withCall bool, key, value string) metric.MeasurementOption {
	k := attrKey{shared: e.Shared, key: key, value: value}
	if r.cfg.names {
		k.name = e.Name
	}
	if withCall {
		k.call = 1
		if e.Try {
			k.call = 2
		}
	}
	if o, ok := r.cache.Load(k); ok {
		return o.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(k.set())
	if !r.cfg.names {
		r.cache.Store(k, o)
	}
	return o
}

func (k attrKey) set() attribute.Set {
	mode := "exclusive"
	if k.shared {
		mode = "shared"
	}
	attrs := []attribute.KeyValue{attribute.String("advisory.lock.mode", mode)}
	if k.name != "" {
		attrs = append(attrs, attribute.String("advisory.lock.name", k.name))
	}
	switch k.call {
	case 1:
		attrs = append(attrs, attribute.String("advisory.lock.call", "lock"))
	case 2:
		attrs = append(attrs, attribute.String("advisory.lock.call", "try_lock"))
	}
	if k.key != "" {
		attrs = append(attrs, attribute.String(k.key, k.value))
	}
	return attribute.NewSet(attrs...)
}

func (r *recorder) acquired(e advisory.LockEvent) {
	ctx := context.Background()
	attrs := r.opt(e, true, "advisory.lock.outcome", "acquired")
	r.acquisitions.Add(ctx, 1, attrs)
	r.wait.Record(ctx, e.Wait.Seconds(), attrs)
	r.held.Add(ctx, 1, r.opt(e, false, "", ""))
}

func (r *recorder) notAcquired(e advisory.LockEvent) {
	ctx := context.Background()
	attrs := r.opt(e, true, "advisory.lock.outcome", e.Reason)
	r.acquisitions.Add(ctx, 1, attrs)
	r.wait.Record(ctx, e.Wait.Seconds(), attrs)
}

func (r *recorder) ended(e advisory.LockEvent) {
	ctx := context.Background()
	r.hold.Record(ctx, e.Held.Seconds(), r.opt(e, false, "advisory.lock.end", e.Reason))
	r.held.Add(ctx, -1, r.opt(e, false, "", ""))
	if e.Lost() {
		r.losses.Add(ctx, 1, r.opt(e, false, "advisory.lock.loss.cause", e.Reason))
	}
}
