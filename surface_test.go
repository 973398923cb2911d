package retry_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// surface is the root package's exported surface, reviewed as go doc shows
// it: every top-level name (types, functions, constants and variables,
// those go doc lists under a type included; methods and fields are not
// counted), grouped by what a user comes for. A name added to the package
// fails TestSurface until it is added here, next to a reason.
//
// The house limit is 40 names (../shared/tools/doccheck). This package holds
// 52, plus 1 deprecated name that goes before v1, and keeps them because
// each group is one concept a user of Do needs without another import: the
// call (Do, DoValue, Policy and its Options), the schedule (3 backoffs, a
// jitter's 3 modes), the decision (a classifier's 3 answers and the markers
// that set them), the outcome (a *Error and the 9 reasons it can carry, each
// a sentinel because users test them with errors.Is), the bounds on load (a
// budget, a limiter, a concurrency limit and a breaker, each an interface
// with the built-in beside it, because the loop's fast paths for the
// built-ins use their unexported methods), and the server's signals, which
// stay in the root because retryhttp, retrygrpc and the stores all read them
// through the loop. Moving any group to a package of its own would make a
// user import two packages to write one Policy.
var surface = map[string][]string{
	"the call": {"Do", "DoValue", "Policy", "Option", "Sequential", "Once", "Next"},
	"the schedule": {"Backoff", "Exponential", "Decorrelated", "Constant",
		"Jitter", "FullJitter", "EqualJitter", "NoJitter"},
	"the decision": {"Classifier", "Classifiers", "DefaultClassifier", "Decision",
		"Undecided", "Retry", "Stop", "Permanent", "Transient"},
	"the outcome": {"Error", "OutcomeUnknown", "ErrExhausted", "ErrNotRetryable",
		"ErrAlreadyRetried", "ErrNotIdempotent", "ErrBudgetExhausted", "ErrServerDelay",
		"ErrNoTimeLeft", "ErrNoSlot", "ErrBreakerOpen"},
	"the bounds on load": {"Budget", "TokenBucket", "NewBudget", "Limiter", "RateLimiter",
		"Reservation", "Concurrency", "ConcurrencyLimit", "Breaker", "CircuitBreaker"},
	"the server's signals": {"CheckResponse", "ResponseError", "ParseRetryAfter", "RetryAfter"},
	"watching a call":      {"Event", "AttemptFrom", "HedgeWon"},
	// Former names, each kept as an alias of the name that replaced it
	// (CHANGELOG.md, "Migrating from untagged main"), and gone before v1.
	"deprecated": {"Unknown"},
}

// surfaceLimit is the most names the package may hold: 40 is the house
// limit, and the reason for more is written at surface above.
const surfaceLimit = 53

func TestSurface(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			require.NoError(t, err)
			files = append(files, f)
		}
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/seed93a044d1/retry")
	require.NoError(t, err)
	var got []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, n := range v.Names {
				if ast.IsExported(n) {
					got = append(got, n)
				}
			}
		}
	}
	values(d.Consts)
	values(d.Vars)
	for _, f := range d.Funcs {
		got = append(got, f.Name)
	}
	for _, typ := range d.Types {
		got = append(got, typ.Name)
		for _, f := range typ.Funcs {
			got = append(got, f.Name)
		}
		values(typ.Consts)
		values(typ.Vars)
	}
	var want []string
	for _, names := range surface {
		want = append(want, names...)
	}
	slices.Sort(got)
	slices.Sort(want)
	assert.Equal(t, want, got, "the exported surface: a new name needs its place and reason in surface")
	assert.LessOrEqual(t, len(got), surfaceLimit, "see surfaceLimit")
}
