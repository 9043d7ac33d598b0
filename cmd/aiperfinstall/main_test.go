package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

// -h and a stray argument install nothing (the install is about 1 GB).
func TestHelpInstallsNothing(t *testing.T) {
	cmdtest.AssertHelp(t, "aiperf==")
	r := cmdtest.Run(t, []string{"now"})
	assert.Equal(t, 2, r.Code, r.Stderr)
	assert.Empty(t, r.Left)
}
