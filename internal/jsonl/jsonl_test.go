package jsonl

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadAndReadStrict(t *testing.T) {
	type row struct {
		A int `json:"a"`
	}
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "x.jsonl")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	rows, err := Read[row](write("{\"a\": 1}\n\n{\"a\": 2, \"b\": 3}\n"))
	require.NoError(t, err)
	assert.Equal(t, []row{{1}, {2}}, rows, "blank lines skipped, unknown fields dropped")

	_, err = ReadStrict[row](write("{\"a\": 1}\n{\"a\": 2, \"b\": 3}\n"))
	assert.ErrorContains(t, err, `x.jsonl line 2: json: unknown field "b"`)
	_, err = Read[row](write("{\"a\": 1} {\"a\": 2}\n"))
	assert.ErrorContains(t, err, "x.jsonl line 1: more than one JSON value on the line")
	_, err = Read[row](write("{\"a\": 1}\nnope\n"))
	assert.ErrorContains(t, err, "x.jsonl line 2:")
}
