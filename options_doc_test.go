package advisory_test

import (
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optionInteractions are the options that change what another does without a refusal:
// each option's godoc names the other.
var optionInteractions = [][2]string{
	{"WithLocalHandoff", "WithSharedSessions"},       // a Lock on a shared session never hands off
	{"WithLocalHandoff", "WithWaitSessions"},         // a wait place moves with a handoff
	{"WithLocalHandoff", "WithLeaderTable"},          // a Lock that published never hands off
	{"WithLocalHandoff", "WithHooks"},                // LockEvent.Handoff
	{"WithoutDrain", "WithSharedSessions"},           // Do and TryDo may then hold on a shared session
	{"WithoutDrain", "WithDrainWait"},                // Lock.Drain still waits
	{"WithSessionLimits", "WithSharedSessions"},      // retireAfter retires shared sessions too
	{"WithHeartbeat", "WithCancelGrace"},             // a sliced wait's bound
	{"WithoutNamesInActivity", "WithSharedSessions"}, // a shared session's batches name no lock anyway
}

// TestOptionDocsNameEveryRefusalAndInteraction reads the package's godoc (go/doc) and
// checks, for every refusal of optionRefusals, that the godoc of each option involved
// names the other options involved, the error New returns, and, where the path decides,
// the path ("transaction pooler", or "behind a proxy" where any proxy does); and for
// every interaction of optionInteractions, that each option names the other.
func TestOptionDocsNameEveryRefusalAndInteraction(t *testing.T) {
	t.Parallel()
	docs := optionDocs(t, ".")
	var missing []string
	whole := 0 // refusals documented on every side
	for _, r := range optionRefusals {
		before := len(missing)
		for _, a := range r.options {
			d, ok := docs[a]
			require.True(t, ok, "%s: no such option", a)
			for _, b := range r.options {
				if !strings.Contains(d, b) {
					missing = append(missing, fmt.Sprintf("%s does not name %s, with which New refuses it (%s)", a, b, r.name))
				}
			}
			for _, w := range r.docWords() {
				if !strings.Contains(strings.ToLower(d), strings.ToLower(w)) {
					missing = append(missing, fmt.Sprintf("%s does not say %q of a refusal (%s)", a, w, r.name))
				}
			}
		}
		if len(missing) == before {
			whole++
		}
	}
	told := 0 // interactions named on both sides
	for _, pair := range optionInteractions {
		before := len(missing)
		for i, a := range pair {
			if !strings.Contains(docs[a], pair[1-i]) {
				missing = append(missing, fmt.Sprintf("%s does not name %s, which changes what it does", a, pair[1-i]))
			}
		}
		if len(missing) == before {
			told++
		}
	}
	t.Logf("refusals documented on every side: %d of %d; interactions on both sides: %d of %d",
		whole, len(optionRefusals), told, len(optionInteractions))
	assert.Empty(t, missing, "godoc of the options (go doc -all)")
}

// docWords are the words each option of r says of the refusal: the error, and the path
// where the path decides.
func (r optionRefusal) docWords() []string {
	words := []string{"New"}
	if len(r.pairs) > 0 {
		words = append(words, "connection string")
	}
	for _, err := range []error{r.direct, r.session, r.transaction} {
		if err != nil {
			words = append(words, errName(err))
			break
		}
	}
	switch {
	case r.early():
	case r.session != nil:
		words = append(words, "behind a proxy")
	default:
		words = append(words, "transaction pooler")
	}
	return words
}

// optionDocs returns the godoc of each function of the package in dir, links and line
// breaks flattened ("[WithHolding]" reads "WithHolding").
func optionDocs(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	require.NoError(t, err)
	p := doc.New(pkgs["advisory"], "github.com/pgadvisory/advisory", 0)
	flat := regexp.MustCompile(`\s+`)
	out := map[string]string{}
	add := func(fs []*doc.Func) {
		for _, f := range fs {
			out[f.Name] = flat.ReplaceAllString(strings.NewReplacer("[", "", "]", "").Replace(f.Doc), " ")
		}
	}
	add(p.Funcs)
	for _, ty := range p.Types {
		add(ty.Funcs)
	}
	return out
}
