package advisory

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestParkPauseFallsOnTheManagersTicks: a parked Lock's next try comes at a tick of its
// Manager's grid, after a varied quarter of its wait so far (2 ms to 1 s), at most one
// tick later than that.
func TestParkPauseFallsOnTheManagersTicks(t *testing.T) {
	hs := &hostSet{parkPhase: int64(3 * time.Millisecond)}
	now := time.Now()
	for _, waited := range []time.Duration{0, time.Millisecond, 30 * time.Millisecond, 400 * time.Millisecond,
		10 * time.Second, time.Hour} {
		share := min(max(waited/parkShare, parkFirst), parkLongest)
		for range 200 {
			d := hs.parkPause(now.Add(-waited), now)
			due := now.Add(d).UnixNano()
			require.Zero(t, (due-hs.parkPhase)%int64(parkTick), "waited %v: due off the grid", waited)
			require.GreaterOrEqual(t, d, share/2, "waited %v", waited)
			require.Less(t, d, share*3/2+parkTick, "waited %v", waited)
		}
	}
}
