package check_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/check"
)

var backticked = regexp.MustCompile("`([a-z0-9-]+)`")

// docStages reads docs/QUALIFICATION.md's stage table: each stage's checks cell (the last
// cell of its row), parenthesised remarks left out.
func docStages(t *testing.T) (map[string][]string, string) {
	b, err := os.ReadFile("../../docs/QUALIFICATION.md")
	require.NoError(t, err)
	doc := string(b)
	stages := map[string][]string{}
	paren := regexp.MustCompile(`\([^()]*\)`)
	for _, line := range strings.Split(doc, "\n") {
		m := regexp.MustCompile("^\\| `([a-z]+)`").FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimSpace(line), "|"), " | ")
		cell := paren.ReplaceAllString(cells[len(cells)-1], "")
		for _, n := range backticked.FindAllStringSubmatch(cell, -1) {
			stages[m[1]] = append(stages[m[1]], n[1])
		}
	}
	require.NotEmpty(t, stages["artifacts"], "the stage table")
	return stages, doc
}

// The docs' check list and the registry agree: every registered check is listed under each
// of its stages (a check of any stage, anywhere in the page), and every listed check is
// registered. Shown failing before frame-size and influence-size were added to the docs.
func TestRegistryMatchesTheDocs(t *testing.T) {
	stages, doc := docStages(t)
	for _, c := range check.Registry {
		for _, s := range c.Stages {
			if s == "" {
				assert.Contains(t, doc, "`"+c.Name+"`", "check %s is not in docs/QUALIFICATION.md", c.Name)
				continue
			}
			assert.Contains(t, stages[s], c.Name, "check %s is not listed under stage %s in docs/QUALIFICATION.md", c.Name, s)
		}
	}
	for s, names := range stages {
		for _, n := range names {
			assert.True(t, check.Registered(n), "docs/QUALIFICATION.md lists %s under %s, which is no registered check", n, s)
		}
	}
}

// Every check name the harness writes (a Failure's) is registered, and no failure is a
// "check NAME:" message built by hand, which only its text would name (shown failing on the
// 43 such messages there were, before they became check.Fail).
func TestEveryCheckNameIsRegistered(t *testing.T) {
	uses := regexp.MustCompile(`(?:\bfail|\bFail|\bfinite|\bDigest)\("([a-z0-9-]+)"|Check: "([a-z0-9-]+)"`)
	byHand := regexp.MustCompile(`"check [a-z0-9-]+[: ]`)
	files, err := filepath.Glob("../*/*.go")
	require.NoError(t, err)
	var seen []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range byHand.FindAllString(string(b), -1) {
			t.Errorf("%s builds a check's failure by hand (%s...): use check.Fail", f, m)
		}
		for _, m := range uses.FindAllStringSubmatch(string(b), -1) {
			name := m[1] + m[2]
			assert.True(t, check.Registered(name), "%s names check %q, which is not in check.Registry", f, name)
			seen = append(seen, name)
		}
	}
	assert.Contains(t, seen, "frame-count", "the scan finds the checks")
	for _, c := range check.Registry {
		assert.True(t, slices.Contains(seen, c.Name), "registered check %s is written nowhere in harness/", c.Name)
	}
}

// A failure's names are read from the error, through errors.Join and %w, and what it wraps
// stays reachable.
func TestFailureNames(t *testing.T) {
	base := errors.New("disk full")
	launch := check.Fail("launch", "start: %w", base)
	assert.Equal(t, "check launch: start: disk full", launch.Error())
	err := errors.Join(check.Fail("frame-count", "17 frames"), fmt.Errorf("stage: %w", launch), errors.New("plain"), check.Fail("frame-count", "again"))
	assert.Equal(t, []string{"frame-count", "launch"}, check.Names(err))
	assert.ErrorIs(t, err, base)
	assert.Empty(t, check.Names(errors.New("check size: a message is not a check")))
}
