package advisory

import (
	"context"
	"testing"
	"time"
)

// BenchmarkHoldingLookup is what every Lock call pays for reentrancy: one lookup of a
// holding in its ctx, which carries none (the uncontended Lock's case), for a
// background ctx and for one with a deadline and a value of the caller's.
func BenchmarkHoldingLookup(b *testing.B) {
	type callerKey struct{}
	deadline, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for name, ctx := range map[string]context.Context{
		"background": context.Background(),
		"deadline":   context.WithValue(deadline, callerKey{}, 1),
	} {
		b.Run(name, func(b *testing.B) {
			found := 0
			for range b.N {
				if h, _ := ctx.Value(holdingKey{}).(*ctxHolding); h != nil {
					found++
				}
			}
			if found != 0 {
				b.Fatal("found a holding")
			}
		})
	}
}
