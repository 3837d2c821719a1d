package main

import (
	"fmt"
	"slices"
	"strings"
)

// roundsTable writes each headline round's locks/s and ratios, and the spread of the
// ratios over the rounds: the headline table gives each row's median round, and a
// difference smaller than this spread is not one the fleet can show.
func (fr fleetResults) roundsTable(b *strings.Builder) {
	n := fr.rounds()
	if n < 2 {
		return
	}
	order := "in the order of the table"
	if fr.Rotated {
		order = "each round beginning with the next implementation (advisory, LockKey, raw in the first)"
	}
	fmt.Fprintf(b, "Each row above is the median of %d rounds by locks/s; each round ran every point once, %s, "+
		"so that drift reaches every implementation alike. Per round, with the ratios taken "+
		"within the round:\n\n", n, order)
	b.WriteString("| round | workload | advisory | advisory LockKey | raw | advisory / raw | LockKey / raw |\n|---|---|---|---|---|---|---|\n")
	ratios := map[string][]float64{}
	for r := range n {
		for _, skew := range []string{"uniform", "hot 90/10"} {
			rate := map[string]float64{}
			for _, p := range fr.Main {
				if p.Round == r && p.Skew == skew {
					rate[p.Impl] = p.LocksPerSec
				}
			}
			if rate["raw"] == 0 {
				continue
			}
			lib, key := rate["advisory"]/rate["raw"], rate[implKey]/rate["raw"]
			ratios[skew+"/advisory"] = append(ratios[skew+"/advisory"], lib)
			ratios[skew+"/key"] = append(ratios[skew+"/key"], key)
			fmt.Fprintf(b, "| %d | %s | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n", r+1, skew, rate["advisory"], rate[implKey],
				rate["raw"], lib, key)
		}
	}
	b.WriteString("\n")
	for _, skew := range []string{"uniform", "hot 90/10"} {
		lib, key := ratios[skew+"/advisory"], ratios[skew+"/key"]
		if len(lib) == 0 {
			continue
		}
		fmt.Fprintf(b, "- **%s:** advisory / raw %s; LockKey / raw %s.\n", skew, spread(lib), spread(key))
	}
	b.WriteString("\n")
}

// spread writes the median of vs and their range, over the headline's rounds.
func spread(vs []float64) string { return spreadOver(vs, "rounds") }

// spreadOver writes the median of vs and their range, over as many of what as vs holds.
func spreadOver(vs []float64, what string) string {
	s := slices.Clone(vs)
	slices.Sort(s)
	return fmt.Sprintf("median %.2fx (%.2fx to %.2fx over %d %s)", s[(len(s)-1)/2], s[0], s[len(s)-1], len(s), what)
}
