package advotel_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/pgadvisory/advisory"
	advotel "github.com/pgadvisory/advisory/contrib/otel"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

var (
	srv      *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.Suite{Srv: &srv, Err: &startErr}.Run(m))
}

// TestPrometheusScrape: a Manager with the OTel hooks, exported through the OTel
// Prometheus exporter, served over HTTP and scraped: acquisitions by outcome, waits,
// hold times, losses by cause and the held gauge appear with the right counts.
func TestPrometheusScrape(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer mp.Shutdown(ctx)
	hooks, err := advotel.Hooks(mp)
	require.NoError(t, err)
	m, err := advisory.New(ctx, srv.DSN(), advisory.WithHooks(hooks))
	require.NoError(t, err)
	defer m.Close()
	other, err := advisory.New(ctx, srv.DSN())
	require.NoError(t, err)
	defer other.Close()

	for i := 0; i < 3; i++ {
		l, err := m.Lock(ctx, "scrape")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	held, err := other.Lock(ctx, "scrape")
	require.NoError(t, err)
	_, err = m.TryLock(ctx, "scrape")
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, held.Unlock(ctx))
	l, err := m.Lock(ctx, "scrape")
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	still, err := m.Lock(ctx, "scrape-held")
	require.NoError(t, err)
	defer still.Unlock(ctx)

	body := scrape(t, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Logf("scrape:\n%s", body)
	for _, want := range []string{
		`advisory_lock_acquisitions_total{advisory_lock_call="lock",advisory_lock_mode="exclusive",advisory_lock_outcome="acquired"`, // 5
		`advisory_lock_acquisitions_total{advisory_lock_call="try_lock",advisory_lock_mode="exclusive",advisory_lock_outcome="locked"`,
		`advisory_lock_losses_total{advisory_lock_loss_cause="terminated",advisory_lock_mode="exclusive"`,
		`advisory_lock_wait_duration_seconds_bucket{`,
		`advisory_lock_hold_duration_seconds_count{advisory_lock_end="released",advisory_lock_mode="exclusive"`,
		`advisory_locks_held{advisory_lock_mode="exclusive"`,
	} {
		require.Contains(t, body, want)
	}
	require.Equal(t, "5", value(t, body, `advisory_lock_acquisitions_total{advisory_lock_call="lock",advisory_lock_mode="exclusive",advisory_lock_outcome="acquired"`))
	require.Equal(t, "1", value(t, body, `advisory_lock_losses_total{advisory_lock_loss_cause="terminated",advisory_lock_mode="exclusive"`))
	require.Equal(t, "3", value(t, body, `advisory_lock_hold_duration_seconds_count{advisory_lock_end="released",advisory_lock_mode="exclusive"`))
	require.Equal(t, "1", value(t, body, `advisory_locks_held{advisory_lock_mode="exclusive"`), "one lock held now")
}

func terminate(t *testing.T, pid uint32) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), srv.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
	require.NoError(t, err)
}

// scrape serves h on a loopback port and GETs /metrics.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()
	resp, err := http.Get(fmt.Sprintf("http://%s/metrics", ln.Addr()))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// value returns the sample value of the first line starting with prefix.
func value(t *testing.T, body, prefix string) string {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no sample %s", prefix)
	return ""
}
