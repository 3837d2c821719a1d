package advisory_test

import (
	"context"
	"sync"
	"testing"
)

// TestHardeningSessionCloseRacesManagerClose: Session.Close and the Manager's Close at
// once. Run with -race: Session.Close wrote the session's retire flag while the
// Manager's Close read it in release (found by TestModel under -race).
func TestHardeningSessionCloseRacesManagerClose(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	for range 20 {
		m := newManager(t, nil)
		s, err := m.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s.Close(context.Background()) }()
		go func() { defer wg.Done(); m.Close() }()
		wg.Wait()
	}
}
