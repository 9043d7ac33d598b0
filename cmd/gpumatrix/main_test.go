package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/internal/cmdtest"
)

func TestMain(m *testing.M) { cmdtest.Main(m, main) }

func TestHelpIsUsageNotTheMatrix(t *testing.T) {
	cmdtest.AssertHelp(t, "matrix")
	r := cmdtest.Run(t, []string{"extra"})
	assert.Equal(t, 2, r.Code, r.Stderr)
	assert.Empty(t, r.Stdout)
	r = cmdtest.Run(t, nil)
	require.Equal(t, 0, r.Code, r.Stderr)
	var m map[string][]Shard
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &m))
	assert.NotEmpty(t, m["include"])
}
