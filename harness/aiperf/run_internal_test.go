package aiperf

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// AIPerf's IPC sockets live below the TMPDIR it is given: a deep one (a test's t.TempDir) made
// their paths overflow a Unix socket address and AIPerf exit 0 having sent nothing.
func TestShortTempBase(t *testing.T) {
	assert.Equal(t, "/tmp", shortTempBase("/tmp"))
	deep := "/tmp/TestInterruptedRunLeavesOneReport3705526286/002"
	assert.Equal(t, "/tmp", shortTempBase(deep))
	worst := shortTempBase(deep) + "/aiperf-4294967295/tmpjo1denr6/aiperf/event_bus_proxy_frontend.ipc"
	assert.LessOrEqual(t, len(worst), 107, worst)
	assert.Equal(t, "/var/tmp/x", shortTempBase("/var/tmp/x"))
}
