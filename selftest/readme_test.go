package selftest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeLayoutMatchesTheTree holds README's layout table to the tree: every path it names
// exists, and every program under cmd/ and every package under internal/ is named in it (a
// program by its path, an internal package by its path or its name in backquotes).
func TestReadmeLayoutMatchesTheTree(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Layout\n")
	require.True(t, ok, "README has no Layout section")
	section, _, _ = strings.Cut(section, "\n## ")
	var table []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "| `") {
			table = append(table, line)
		}
	}
	require.NotEmpty(t, table, "no rows in README's layout table")
	text := strings.Join(table, "\n")
	for _, m := range regexp.MustCompile("`([^` ]+)`").FindAllStringSubmatch(text, -1) {
		p := m[1]
		if !strings.Contains(p, "/") && !strings.HasSuffix(p, ".go") {
			continue // a package name, a flag or a file pattern, not a path
		}
		if strings.Contains(p, "*") {
			matches, err := filepath.Glob(p)
			require.NoError(t, err)
			assert.NotEmpty(t, matches, "README's layout names %s, which matches nothing", p)
			continue
		}
		_, err := os.Stat(p)
		assert.NoError(t, err, "README's layout names %s", p)
	}
	for _, dir := range []string{"cmd", "internal"} {
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			p := dir + "/" + e.Name()
			named := strings.Contains(text, "`"+p+"`")
			if dir == "internal" {
				named = named || strings.Contains(text, "`"+e.Name()+"`")
			}
			assert.True(t, named, "README's layout does not name %s", p)
		}
	}
}
