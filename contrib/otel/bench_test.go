package advotel_test

import (
	"context"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgadvisory/advisory"
	advotel "github.com/pgadvisory/advisory/contrib/otel"
)

// BenchmarkOTelOverhead alternates, per iteration, a Lock+Unlock cycle on a Manager
// without hooks and one on a Manager recording through the OTel SDK (a manual reader, as
// a Prometheus exporter has), and reports the medians and their ratio x-otel.
func BenchmarkOTelOverhead(b *testing.B) {
	if srv == nil {
		b.Skip(startErr)
	}
	ctx := context.Background()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(ctx)
	hooks, err := advotel.Hooks(mp)
	if err != nil {
		b.Fatal(err)
	}
	plain, err := advisory.New(ctx, srv.DSN()+" pool_max_conns=1")
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	observed, err := advisory.New(ctx, srv.DSN()+" pool_max_conns=1", advisory.WithHooks(hooks))
	if err != nil {
		b.Fatal(err)
	}
	defer observed.Close()
	cycle := func(m *advisory.Manager, name string) {
		l, err := m.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	without, with := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cycle(plain, "bench/plain")
		mid := time.Now()
		cycle(observed, "bench/otel")
		without, with = append(without, mid.Sub(start)), append(with, time.Since(mid))
	}
	b.StopTimer()
	slices.Sort(without)
	slices.Sort(with)
	w, o := without[len(without)/2], with[len(with)/2]
	b.ReportMetric(float64(w.Microseconds()), "plain-µs")
	b.ReportMetric(float64(o)/float64(w), "x-otel")
}
