package qualify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/ledger"
)

// doctoredExport writes an AIPerf artifact directory of one warmup and two measured requests,
// each completed on the server in 100 ms of Task; the measured request named in noLatency has
// its request_latency removed from profile_export.jsonl (or its record dropped, drop).
func doctoredExport(t *testing.T, noLatency string, drop bool) (aiperf.Exports, []ledger.Entry) {
	dir := t.TempDir()
	var records, raws []string
	var entries []ledger.Entry
	for i, id := range []string{"w", "m1", "m2"} {
		phase := aiperf.Profiling
		if i == 0 {
			phase = aiperf.Warmup
		}
		meta := `{"x_request_id":"` + id + `","benchmark_phase":"` + phase + `","credit_issued_ns":` + string(rune('1'+i)) + `000000}`
		metrics := `{"request_latency":{"value":130,"unit":"ms"}}`
		if id == noLatency {
			metrics = `{"time_to_first_output":{"value":1,"unit":"ms"}}`
		}
		if id != noLatency || !drop {
			records = append(records, `{"metadata":`+meta+`,"metrics":`+metrics+`}`)
		}
		raws = append(raws, `{"metadata":`+meta+`,"status":200,"payload":{"prompt":"p"},"responses":[{"text":"{\"id\":\"video_`+id+`\"}"}]}`)
		entries = append(entries, ledger.Entry{Event: "job", RequestID: id, JobID: "video_" + id, Status: "completed",
			Timing: &api.Timing{TaskCallWallMS: 100}, Output: &ledger.Output{SHA256: "x"}})
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "profile_export.jsonl"), []byte(strings.Join(records, "\n")+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "profile_export_raw.jsonl"), []byte(strings.Join(raws, "\n")+"\n"), 0o644))
	x, err := aiperf.ReadExports(dir)
	require.NoError(t, err)
	return x, entries
}

// A latency AIPerf did not record fails the timing stage by name: read as 0 ms it made the
// overhead negative, and the overhead budget could not fail. Shown failing by removing the
// check from Timing: the doctored runs passed.
func TestTimingFailsWithoutAClientLatency(t *testing.T) {
	e := lookup(t, "ref-t2v")
	timing := func(noLatency string, drop bool) (string, error) {
		x, entries := doctoredExport(t, noLatency, drop)
		reqs := aiperf.Join(x, entries)
		require.NoError(t, aiperf.Account(reqs, entries), "every request completed on both sides")
		run := aiperfRun{Requests: requestsOf(reqs, nil)}
		arts := artifactSet{Run: run}
		for _, r := range run.Requests {
			arts.Served = append(arts.Served, artifact{aiperfRequest: r})
		}
		row := NewRow(e)
		c := &caseRun{T: t, Entry: e, Config: Defaults(), Row: &row}
		return c.timing(arts)
	}
	msg, err := timing("", false)
	require.NoError(t, err, "the whole export")
	assert.Contains(t, msg, "overhead p50 30.0 ms")

	for _, drop := range []bool{false, true} {
		_, err = timing("m2", drop)
		var f *check.Failure
		require.ErrorAs(t, err, &f, "drop record %v", drop)
		assert.Equal(t, "timing-latency", string(f.Check))
		assert.Contains(t, err.Error(), "request m2 (job video_m2): AIPerf recorded no request_latency")
	}

	// A warmup request without a latency is outside timing, as warmup is.
	_, err = timing("w", false)
	assert.NoError(t, err)
}
