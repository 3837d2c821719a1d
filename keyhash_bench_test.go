package advisory_test

import (
	"testing"

	"github.com/pgadvisory/advisory"
)

func BenchmarkKeyOf(b *testing.B) {
	for _, name := range []string{"migrations", "tenant/4f1c2a9e-8d53-4b7e-9a55-0e5b8c6f2d11/billing-run"} {
		b.Run(name[:min(len(name), 10)], func(b *testing.B) {
			b.SetBytes(int64(len(name)))
			for i := 0; i < b.N; i++ {
				advisory.KeyOf(name)
			}
		})
	}
}
