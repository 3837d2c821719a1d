package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionFromAClone (issue 37, item 10): a binary built from a clone (which has no
// tags) as the README says, `go install ./cmd/pgadvisory` with the toolchain's VCS
// stamping on, reported the pseudo-version v0.0.0-TIMESTAMP-COMMIT, which reads as older
// than every release. It reports the commit and the release it is at or after.
func TestVersionFromAClone(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := t.TempDir()
	clone := filepath.Join(dir, "advisory")
	out, err := exec.Command("git", "clone", "--quiet", "../..", clone).CombinedOutput()
	require.NoError(t, err, "%s", out)
	pg := filepath.Join(dir, "pgadvisory")
	// -trimpath (as the Dockerfile and docs/migrations.md build) changes no version or VCS
	// information, and keeps the compiled packages independent of the clone's directory,
	// a new one each run: they come from the build cache (without it the build took 20 s
	// of CPU every run; with it, 2.6 s once cached).
	build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", pg, "./cmd/pgadvisory")
	build.Dir = clone
	out, err = build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(pg, "--version").Output()
	require.NoError(t, err)
	got := string(out)
	assert.NotContains(t, got, "v0.0.0-", "the untagged pseudo-version")
	assert.Contains(t, got, strings.TrimSpace(string(head))[:12], "the commit")
	if tags, _ := exec.Command("git", "-C", clone, "tag").Output(); len(tags) == 0 {
		assert.Regexp(t, `^pgadvisory \(devel\) [0-9a-f]{12}, after v\d+\.\d+\.\d+\n$`, got)
	}
}

// TestLastReleaseIsTheChangelogs: the release a build from a clone names is the newest
// in CHANGELOG.md.
func TestLastReleaseIsTheChangelogs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../CHANGELOG.md")
	require.NoError(t, err)
	newest := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)`).FindStringSubmatch(string(b))
	require.NotNil(t, newest, "a release heading in CHANGELOG.md")
	r := noDB(t, "--version")
	require.Equal(t, 0, r.code, r.stderr)
	if strings.Contains(r.stdout, "(devel)") {
		assert.Contains(t, r.stdout, ", after "+newest[1]+"\n")
	}
}
