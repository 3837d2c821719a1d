package advisory_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// BenchmarkReenteredLock is one re-entry of a held lock and its Unlock, with the
// holding's ctx: no statement, no connection.
func BenchmarkReenteredLock(b *testing.B) {
	m := newManager(b, nil)
	ctx := context.Background()
	outer, err := m.Lock(ctx, b.Name())
	require.NoError(b, err)
	defer outer.Unlock(ctx)
	under := advisory.ContextWithLock(ctx, outer)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		l, err := m.Lock(under, b.Name())
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
