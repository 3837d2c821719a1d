package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The per-draw ratios pair each draw of a row with the same draw of its floor, and a row
// whose floor was not drawn as often gets none.
func TestDrawRatiosPairDraws(t *testing.T) {
	floor := &row{Name: "floor"}
	ours := &row{Name: "ours", Floor: "floor"}
	other := &row{Name: "other", Floor: "floor"}
	for _, draw := range [][3][]float64{
		{{100, 100, 100}, {110, 110, 110}, {50}},
		{{60, 60, 200}, {90, 90, 90}, nil},
	} {
		floor.values = append(floor.values, draw[0]...)
		ours.values = append(ours.values, draw[1]...)
		other.values = append(other.values, draw[2]...)
		endDraw([]*row{floor, ours, other})
	}
	require.Equal(t, []float64{100, 60}, floor.drawMedians)
	require.Equal(t, []float64{110, 90}, ours.drawMedians)
	require.Equal(t, []float64{50}, other.drawMedians, "a draw without samples has no median")
	res := summarize([]*row{floor, ours, other})
	require.InDeltaSlice(t, []float64{1.1, 1.5}, res[1].DrawRatios, 1e-9)
	require.Empty(t, res[2].DrawRatios, "draws that do not pair up give no ratios")
	// The lower of the middle two, as every median in the report.
	require.Equal(t, "1.10x (1.10-1.50x, 2 draws)", drawRatiosText(res[1].DrawRatios))
}
