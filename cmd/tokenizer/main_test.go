package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// -h (and a flag-like argument) must not become a directory named after it.
func TestHelpWritesNothing(t *testing.T) {
	cmdtest.AssertHelp(t, "DIR")
	r := cmdtest.Run(t, []string{"-x"})
	assert.Equal(t, 2, r.Code, r.Stderr)
	assert.Empty(t, r.Left)
	r = cmdtest.Run(t, nil)
	assert.Equal(t, 2, r.Code, r.Stderr)
}

func TestWritesTheTokenizer(t *testing.T) {
	r := cmdtest.Run(t, []string{"tok"})
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Equal(t, "tok\n", r.Stdout)
	assert.Contains(t, r.Left, "tok/tokenizer.json")
}
