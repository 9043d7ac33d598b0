package aiperf

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/internal/proctest"
)

// An install with a log says how far along pip is, from pip's own lines: packages resolved,
// wheels downloaded and their size, then installing. Before, pip ran with -q and the first
// `make test` was silent for minutes.
func TestInstallProgressSaysHowFarAlong(t *testing.T) {
	p := &pipProgress{}
	assert.Equal(t, "", p.status(), "nothing said before pip has")
	for _, chunk := range []string{"Collecting aiperf==0.13.0\n  Downloading aiperf-0.13.0-py3-none-any.whl.metadata (2.1 kB)\n",
		"Collecting pyarrow (from aiperf==0.13.0)\n  Downloading pyarrow-26.0.1-cp312-cp312-manylinux_2_28_x86_64.whl (55.0 MB)\n",
		"  Downloading aiperf-0.13.0-py3-none-any.whl (6.8 MB)\nInstalling coll", "ected packages: pyarrow, aiperf\n"} {
		p.Write([]byte(chunk))
	}
	assert.Equal(t, "2 packages resolved, 2 wheels downloaded (62 MB), installing the packages", p.status())
	assert.Contains(t, p.String(), "Collecting pyarrow", "the output is kept whole for an error's tail")

	var log proctest.Buffer
	stop := p.report(&log, "aiperf install: step 2 of 2, pip install", 20*time.Millisecond)
	time.Sleep(70 * time.Millisecond)
	stop()
	lines := strings.Split(strings.TrimSpace(log.String()), "\n")
	assert.Equal(t, "aiperf install: step 2 of 2, pip install ...", lines[0])
	assert.GreaterOrEqual(t, len(lines), 3, "%q", lines)
	assert.Contains(t, lines[1], ": 2 packages resolved, 2 wheels downloaded (62 MB), installing the packages")
	assert.Contains(t, lines[len(lines)-1], "aiperf install: step 2 of 2, pip install: ended after ")
}
