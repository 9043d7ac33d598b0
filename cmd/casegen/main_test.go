package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// -h, -list and a stray argument write no cases; without them it writes the three files.
func TestWritesOnlyWhenAsked(t *testing.T) {
	cmdtest.AssertHelp(t, "-list")
	r := cmdtest.Run(t, []string{"-list"})
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.Contains(t, r.Stdout, "TestRef_t2v")
	assert.Empty(t, r.Left)
	r = cmdtest.Run(t, []string{"somewhere"})
	assert.Equal(t, 2, r.Code, r.Stderr)
	assert.Empty(t, r.Left)
	r = cmdtest.Run(t, nil)
	assert.Equal(t, 0, r.Code, r.Stderr)
	assert.ElementsMatch(t, []string{"cases_test.go", "cases_gpu_test.go", "cases_nogpu_test.go"}, r.Left)
}
