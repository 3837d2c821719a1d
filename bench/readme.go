package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

// The README's figures live between these markers; the bench command rewrites them from
// the same results as docs/benchmarks.json, so the two cannot disagree.
const (
	readmeBegin = "<!-- bench:begin: written by `cd bench && go run .` from docs/benchmarks.json; do not edit -->"
	readmeEnd   = "<!-- bench:end -->"
)

// writeReadme replaces the README's figures block. It fails if the markers are missing.
func (res results) writeReadme(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(old, []byte(readmeBegin)), bytes.Index(old, []byte(readmeEnd))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q … %q block", path, readmeBegin, readmeEnd)
	}
	var b bytes.Buffer
	b.Write(old[:i+len(readmeBegin)])
	b.WriteString("\n" + res.readmeBlock())
	b.Write(old[j:])
	return os.WriteFile(path, b.Bytes(), 0o644)
}

func (res results) readmeBlock() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Medians from one run of the bench program (%s; load average %s), each row named as in\n"+
		"[docs/benchmarks.json](docs/benchmarks.json); ratios to the raw pgx floor of the same run and placement; unpinned, also\n"+
		"the median of the ratios within each draw of new connections (see docs/benchmarks.md).\n\n", res.Machine, res.Load)
	pls := res.placementNames()
	b.WriteString("| measurement |")
	for _, p := range pls {
		fmt.Fprintf(&b, " %s |", p)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(pls)) + "\n")
	for _, k := range []string{"advisory Lock + Unlock", "advisory Lock + Unlock, cancellable ctx", "advisory TryLock + Unlock",
		"advisory Session Lock + Unlock", handoffOurs, handoffLocal} {
		if res.find(k, pls0(pls)) == nil {
			continue
		}
		fmt.Fprintf(&b, "| `%s` |", k)
		for _, p := range pls {
			if r := res.find(k, p); r != nil {
				fmt.Fprintf(&b, " %s, %.2fx", fmtVal(r.Median, r.Unit), r.Ratio)
				if len(r.DrawRatios) > 0 {
					fmt.Fprintf(&b, " (per draw %.2fx)", median(r.DrawRatios))
				}
				b.WriteString(" |")
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	for _, name := range []string{"advisory loss detection (Done after pg_terminate_backend)", "advisory SIGKILL takeover"} {
		for _, r := range res.Rows {
			if r.Name == name {
				fmt.Fprintf(&b, "| `%s` | %s, %.2fx |%s\n", r.Name, fmtVal(r.Median, r.Unit), r.Ratio, strings.Repeat(" |", max(len(pls)-1, 0)))
			}
		}
	}
	b.WriteString("\n")
	return b.String()
}

func pls0(pls []string) string {
	if len(pls) == 0 {
		return ""
	}
	return pls[0]
}
