package main

import (
	"flag"
	"strings"
)

// unknownFlag rewrites the flag package's "flag provided but not defined: -nmae" as
// "unknown flag --nmae", with the defined flag it most likely meant ("did you mean
// --name?"), if one is close: at most one edit (a letter added, dropped, changed, or two
// neighbours swapped) for a name of up to four letters, two for a longer one. It
// returns "" for any other error.
func unknownFlag(fs *flag.FlagSet, msg string) string {
	name, ok := strings.CutPrefix(msg, "flag provided but not defined: -")
	if !ok {
		return ""
	}
	out := "unknown flag --" + name
	best, bestDist := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestDist && d <= maxEdits(f.Name) {
			best, bestDist = f.Name, d
		}
	})
	if best != "" {
		out += "; did you mean --" + best + "?"
	}
	return out
}

func maxEdits(name string) int {
	if len(name) <= 4 {
		return 1
	}
	return 2
}

// editDistance is the optimal string alignment distance between a and b: insertions,
// deletions, substitutions and transpositions of adjacent bytes each count one.
func editDistance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
