package faults_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// poolFigure is what one holder's fault measured; each duration is after the fault, or
// never within the observation's window.
type poolFigure struct {
	pooler, watch string        // the PgBouncer configuration, the holder's watch
	told          time.Duration // the holder saw its connection fail
	freed         time.Duration // pg_locks no longer showed the holding
	taken         time.Duration // a client through the pooler took the key
	noticed       time.Duration // PgBouncer logged that it closed the holder's client or server
	healed        time.Duration // the cut was healed (never: no cut, or not healed while observed)
	toldText      string
	noticedText   string
}

func (f poolFigure) String() string {
	healed := ""
	if f.healed != never {
		healed = "  healed " + secs(f.healed)
	}
	return fmt.Sprintf("%-18s %-9s told %6s  freed %6s  taken %6s  pgbouncer %6s%s  | told: %s | pgbouncer: %s",
		f.pooler, f.watch, secs(f.told), secs(f.freed), secs(f.taken), secs(f.noticed), healed, f.toldText, f.noticedText)
}

func secs(d time.Duration) string {
	if d == never {
		return "never"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// logFigures logs each holder's figures of one round, for the reader and for
// docs/pooler-faults.md.
func logFigures(t *testing.T, fault string, cases []*poolerCase) []poolFigure {
	t.Helper()
	var out []poolFigure
	for _, p := range allHolders(cases) {
		t.Logf("FIGURE %-16s %v", fault, p.fig)
		out = append(out, p.fig)
	}
	return out
}

// summarizeFigures logs, over the rounds, the median and range of each figure per
// PgBouncer configuration and watch.
func summarizeFigures(t *testing.T, fault string, figs []poolFigure) {
	t.Helper()
	type group struct{ pooler, watch string }
	byGroup := map[group][]poolFigure{}
	var order []group
	for _, f := range figs {
		g := group{f.pooler, f.watch}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], f)
	}
	for _, g := range order {
		fs := byGroup[g]
		pick := func(get func(poolFigure) time.Duration) string {
			ds := make([]time.Duration, len(fs))
			for i, f := range fs {
				ds[i] = get(f)
			}
			return spread(ds)
		}
		t.Logf("SUMMARY %-16s %-18s %-9s n=%d  told %s  freed %s  taken %s  pgbouncer %s", fault, g.pooler, g.watch, len(fs),
			pick(func(f poolFigure) time.Duration { return f.told }), pick(func(f poolFigure) time.Duration { return f.freed }),
			pick(func(f poolFigure) time.Duration { return f.taken }), pick(func(f poolFigure) time.Duration { return f.noticed }))
	}
}

// spread is "median [min–max]" of ds in seconds; runs where it never happened are
// counted apart.
func spread(ds []time.Duration) string {
	var got []time.Duration
	for _, d := range ds {
		if d != never {
			got = append(got, d)
		}
	}
	if len(got) == 0 {
		return "never"
	}
	slices.Sort(got)
	s := fmt.Sprintf("%.2f [%.2f–%.2f]", got[len(got)/2].Seconds(), got[0].Seconds(), got[len(got)-1].Seconds())
	if n := len(ds) - len(got); n > 0 {
		s += fmt.Sprintf(" (never in %d)", n)
	}
	return strings.TrimSpace(s)
}
