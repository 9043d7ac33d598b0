// Package checktest is how a test shows a check failing: Failed asserts that an error failed
// the named check, read from the typed failure (check.Names), and says so in the test's
// output, where TestEveryCheckIsShownFailing (harness/check) reads it from a run of the test.
// A test that only mentions a check's name shows nothing.
package checktest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/harness/check"
)

// Shown starts the line Failed writes to the test's output when the check failed.
const Shown = "shown failing: "

// Failed asserts that err failed check name, and says so in t's output.
func Failed(t testing.TB, err error, name string) bool {
	t.Helper()
	if !assert.Contains(t, check.Names(err), name, "want check %s to fail: %v", name, err) {
		return false
	}
	t.Log(Shown + name)
	return true
}
