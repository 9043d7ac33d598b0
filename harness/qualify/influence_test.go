package qualify

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/models/spec"
)

// The suite's own requests (the shape and influence probes) are held to their actual alike for
// a clip and an edit: an endpoint that reports none is capped, not failed (a clip's
// probe failed, an edit's was capped); one that reports another job fails; a launched
// mediaserve must report it. Shown failing with the video probe's check as it was (a clip
// without actual failed the row).
func TestOwnRequestsWithoutActualAreTreatedAlike(t *testing.T) {
	for _, id := range []string{"ref-t2v", "ref-edit"} {
		e := lookup(t, id)
		row := NewRow(e)
		c := &caseRun{T: t, Entry: e, Row: &row}
		asked := asked(e, e.Defaults)
		endpoint, launched := &serving{External: true}, &serving{}
		require.NoError(t, c.ownSettings(endpoint, "probe-1", asked, api.Actual{}, false), id)
		require.NoError(t, c.ownSettings(endpoint, "probe-2", asked, api.Actual{}, false), id)
		require.Len(t, row.Limits, 2, "%s: one limit a request", id)
		assert.Equal(t, spec.Implemented, row.Limits[0].Ceiling)
		checktest.Failed(t, c.ownSettings(launched, "probe-3", asked, api.Actual{}, false), "actual-settings")
		checktest.Failed(t, c.ownSettings(endpoint, "probe-4", asked, api.Actual{Width: 1}, true), "actual-settings")
	}
}
