package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSharedResultsRoundTrip: docs/benchmarks-shared.json reads back as it was written.
func TestSharedResultsRoundTrip(t *testing.T) {
	b, err := os.ReadFile("../docs/benchmarks-shared.json")
	require.NoError(t, err)
	var r sharedResults
	require.NoError(t, json.Unmarshal(b, &r))
	require.NotEmpty(t, r.Fleets)
	require.NotEmpty(t, r.Idle)
	out, err := json.Marshal(r)
	require.NoError(t, err)
	var again sharedResults
	require.NoError(t, json.Unmarshal(out, &again))
	require.Equal(t, r, again)
}
