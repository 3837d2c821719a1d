package main

import (
	"regexp"
	"runtime/debug"
)

// lastRelease is the newest release in CHANGELOG.md (TestLastReleaseIsTheChangelogs
// keeps them equal). A build from a clone, which has no tags, names it: its source is
// that release or later.
const lastRelease = "v0.1.0"

// untaggedPseudo matches the pseudo-version the toolchain stamps on a build from a
// checkout with no tag before it (v0.0.0-TIMESTAMP-COMMIT, "+dirty" for uncommitted
// changes): it would read as a version older than every release.
var untaggedPseudo = regexp.MustCompile(`^v0\.0\.0-\d{14}-([0-9a-f]{12})(\+dirty)?$`)

// version is the version pgadvisory was built from. A release (`go install ...@v1.2.3`,
// a build from a tagged checkout) or a pseudo-version after a tag prints as the toolchain
// stamped it. A build from a clone, which has no tags, prints "(devel) COMMIT, after
// lastRelease" ("+dirty" after the commit for uncommitted changes), and "(devel), after
// lastRelease" when the build recorded no commit (-buildvcs=false), never the v0.0.0
// pseudo-version, which would read as older than every release.
func version() string {
	var v, rev string
	dirty := false
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if m := untaggedPseudo.FindStringSubmatch(v); m != nil {
		rev, dirty, v = m[1], m[2] != "", ""
	}
	if v != "" && v != "(devel)" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	switch {
	case rev == "":
		return "(devel), after " + lastRelease
	case dirty:
		return "(devel) " + rev + "+dirty, after " + lastRelease
	}
	return "(devel) " + rev + ", after " + lastRelease
}
