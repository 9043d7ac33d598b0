package qualify

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/check/checktest"
	"github.com/mediaqual/mediaqual/harness/ledger"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
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
		return c.timing(arts, nil)
	}
	msg, err := timing("", false)
	require.NoError(t, err, "the whole export")
	assert.Contains(t, msg, "overhead p50 30.0 ms")

	for _, drop := range []bool{false, true} {
		_, err = timing("m2", drop)
		var f *check.Failure
		require.ErrorAs(t, err, &f, "drop record %v", drop)
		checktest.Failed(t, err, "timing-latency")
		assert.Contains(t, err.Error(), "request m2 (job video_m2): AIPerf recorded no request_latency")
	}

	// A warmup request without a latency is outside timing, as warmup is.
	_, err = timing("w", false)
	assert.NoError(t, err)
}

// timedRequest is one measured request of a doctored run: the client's latency, what AIPerf
// recorded of the server's inference_time_s (0: nothing) and the server's timing.
type timedRequest struct {
	latencyMS, aiperfInferenceMS float64
	timing                       *api.Timing
}

// timeDoctored runs the timing stage of e on one warmup and the measured requests given, with a
// native path that timed their Task at 100 ms.
func timeDoctored(t *testing.T, e spec.Entry, cfg Config, pollMS float64, reqs ...timedRequest) (reports.Row, string, error) {
	return timeDoctoredNative(t, e, cfg, pollMS, nativeOutputs{"": {TaskMS: 100}}, reqs...)
}

func timeDoctoredNative(t *testing.T, e spec.Entry, cfg Config, pollMS float64, native nativeOutputs, reqs ...timedRequest) (reports.Row, string, error) {
	warm := timedRequest{latencyMS: 130, timing: &api.Timing{TaskCallWallMS: 100}}
	arts := artifactSet{Run: aiperfRun{PollMS: pollMS}}
	for i, q := range append([]timedRequest{warm}, reqs...) {
		id := fmt.Sprintf("r%d", i)
		r := aiperf.Request{XRequestID: id, Warmup: i == 0, LatencyMS: q.latencyMS, HasLatency: true, CreditIssuedNS: int64(i+1) * 1e9}
		r.ServerInferenceMS, r.HasServerInference = q.aiperfInferenceMS, q.aiperfInferenceMS != 0
		r.Server = []ledger.Entry{{Event: "job", RequestID: id, JobID: "video_" + id, Status: "completed", Timing: q.timing}}
		for _, ar := range requestsOf([]aiperf.Request{r}, nil) {
			arts.Served = append(arts.Served, artifact{aiperfRequest: ar})
		}
	}
	row := NewRow(e)
	c := &caseRun{T: t, Entry: e, Config: cfg, Row: &row}
	msg, err := c.timing(arts, native)
	return row, msg, err
}

// Every figure the server reports of its time is held to a second source: its other report of
// the same Task (AIPerf's reading of inference_time_s), its parts adding up to its total, the
// client's clock; a figure nothing can hold is named the server's claim, and the row limited.
// And every row has an overhead budget: a GPU row's is 0.88 % of the Task plus half the poll
// interval. Shown failing by removing TaskTime, TimeParts and OverheadBudget from the stage: a
// Task reported in ms where s is meant, a Task set to the server's whole time, a negative Task
// and 140 ms of overhead on a GPU row all passed.
func TestTimingCrossChecksTheServersFigures(t *testing.T) {
	ref, gpu := lookup(t, "ref-t2v"), lookup(t, "Wan-AI/Wan2.1-T2V-1.3B")
	honest := &api.Timing{ReceiveMS: 1, QueueMS: 2, TaskCallWallMS: 100, HandoverMS: 0.5, EncodeMS: 5, OtherMS: 1.5, TotalMS: 110}
	row, msg, err := timeDoctored(t, ref, Defaults(), 100, timedRequest{130, 100, honest})
	require.NoError(t, err)
	assert.Contains(t, msg, "every Task time cross-checked")
	assert.Empty(t, row.Limits)

	failsWith := func(name, why string, cfg Config, e spec.Entry, q timedRequest) {
		t.Helper()
		_, _, err := timeDoctored(t, e, cfg, 100, q)
		assert.Equal(t, []string{name}, check.Names(err), "%s: %v", why, err)
		checktest.Failed(t, err, name)
	}
	failsWith("task-wall", "inference_time_s in ms where s is meant", Defaults(), ref, timedRequest{130, 100 * 1000, honest})
	failsWith("task-time-agrees", "inference_time_s half the timing's Task", Defaults(), ref, timedRequest{130, 50, honest})
	whole := *honest
	whole.TaskCallWallMS = whole.TotalMS
	failsWith("timing-parts", "a Task set to the server's whole time", Defaults(), ref, timedRequest{130, 0, &whole})
	negative := *honest
	negative.TaskCallWallMS, negative.OtherMS = -5, 106.5
	failsWith("task-wall", "a negative Task", Defaults(), ref, timedRequest{130, 0, &negative})
	long := *honest
	long.TotalMS, long.OtherMS = 140, 31.5
	failsWith("timing-parts", "a server's total longer than the client's request", Defaults(), ref, timedRequest{130, 100, &long})

	// A GPU row: 100 ms Task and 100 ms poll interval, a budget of 0.88 ms + 50 ms.
	_, msg, err = timeDoctored(t, gpu, Defaults(), 100, timedRequest{150, 100, honest})
	require.NoError(t, err)
	assert.Contains(t, msg, "0.88 % of the Task plus 50 ms")
	failsWith("timing-overhead", "140 ms of overhead on a 100 ms Task", Defaults(), gpu, timedRequest{240, 100, honest})

	// An endpoint that reports its Task once, without parts: the server's claim, and a limit.
	ext := Defaults()
	ext.Target.Endpoint = "http://endpoint.invalid"
	row, msg, err = timeDoctored(t, gpu, ext, 100, timedRequest{150, 100, nil})
	require.NoError(t, err)
	assert.Contains(t, msg, "the server's claim alone")
	require.Len(t, row.Limits, 1)
	assert.Equal(t, spec.FamilyValidated, row.Limits[0].Ceiling)
	assert.Contains(t, row.Limits[0].Why, "inference_time_s (AIPerf's video_inference_time)")

	// Without a native path that times the same Task, the Task time and the overhead are the
	// server's word: labelled so, and a limit; a native Task too short to time against too.
	for _, native := range []nativeOutputs{nil, {"": {TaskMS: 5}}} {
		row, msg, err = timeDoctoredNative(t, ref, Defaults(), 100, native, timedRequest{130, 100, honest})
		require.NoError(t, err)
		assert.Contains(t, msg, "Task p50 100.0 ms (as reported)")
		require.Len(t, row.Limits, 1)
		assert.Contains(t, row.Limits[0].Why, "the Task time is as reported by the server")
	}
}

// An edit answer's Task time is read where SGLang puts it, inference_time_s in the answer
// AIPerf kept, with or without mediaserve's timing beside it (#38 item 5: the edit branch read
// only timing, so an SGLang edit had no Task time).
func TestEditTaskTimeFromTheAnswer(t *testing.T) {
	answer := func(body string) aiperf.Request {
		return aiperf.Request{XRequestID: "e1", Raw: aiperf.RawRecord{Responses: []aiperf.RawResponse{{Text: body}}},
			Server: []ledger.Entry{{Event: "job", RequestID: "e1", JobID: "img_1", Status: "completed"}}}
	}
	sglang := requestsOf([]aiperf.Request{answer(`{"id":"img_1","data":[],"inference_time_s":0.25}`)}, nil)[0]
	assert.Equal(t, 250.0, sglang.TaskMS)
	assert.Equal(t, []check.TaskClaim{{From: "inference_time_s in the answer AIPerf kept", MS: 250}}, sglang.taskClaims)

	both := answer(`{"id":"img_1","inference_time_s":0.25}`)
	both.Server[0].Timing = &api.Timing{TaskCallWallMS: 250}
	q := requestsOf([]aiperf.Request{both}, nil)[0]
	require.Len(t, q.taskClaims, 2, "both reports, to be held to each other")
	_, err := check.TaskAgrees(q.taskClaims)
	assert.NoError(t, err)
}

// task-native holds the server's Task times, summed, to the native Task's timed beside them:
// pairs from the side-by-side runs measured on 2 cores (docs at nativeFaster). One uneven pair
// does not decide; a halved report fails by name; a span profile is held to the lower bound
// alone; a native Task too short to time against holds nothing.
func TestTaskNativeSumsThePairs(t *testing.T) {
	honest := []taskPair{{82.4, 53.9}, {78.3, 60.2}, {137.6, 102.9}, {92.4, 94.6}}
	msg, err := taskNative(honest, true)
	require.NoError(t, err)
	assert.Contains(t, msg, "1.25x")
	halved := []taskPair{{47.9, 78.0}, {45.1, 66.7}, {64.2, 124.9}, {32.3, 93.3}}
	_, err = taskNative(halved, true)
	checktest.Failed(t, err, "task-native")
	assert.ErrorContains(t, err, "0.52x")
	// One pair at 0.4x, the others even: the sum is within.
	_, err = taskNative([]taskPair{{40, 100}, {100, 100}, {100, 100}, {100, 100}}, true)
	require.NoError(t, err)
	// Twice and more the native: a Task stretched over the request, unless the server's time is
	// a span around the Task by its profile.
	stretched := []taskPair{{250, 100}, {210, 100}}
	_, err = taskNative(stretched, true)
	checktest.Failed(t, err, "task-native")
	_, err = taskNative(stretched, false)
	require.NoError(t, err)
	_, err = taskNative(halved, false)
	checktest.Failed(t, err, "task-native")
	msg, err = taskNative([]taskPair{{5, 30}, {5, 80}}, true)
	require.NoError(t, err)
	assert.Empty(t, msg, "a native Task under minNativeMS is not timed against")
}

// Pairs stop early only when their sum is well clear of both bounds: a sum near one goes on to
// besideMax.
func TestTaskPairsSettle(t *testing.T) {
	even := []taskPair{{100, 100}, {90, 100}, {110, 100}}
	assert.True(t, settled(even, true), "1.0x: clear of 1/1.4 and 2")
	assert.True(t, settled([]taskPair{{50, 100}, {45, 100}, {55, 100}}, true), "0.5x: clearly under 1/1.4")
	assert.False(t, settled([]taskPair{{75, 100}, {70, 100}, {80, 100}}, true), "0.75x: within 1.2x of 1/1.4")
	assert.False(t, settled([]taskPair{{190, 100}, {180, 100}, {200, 100}}, true), "1.9x: within 1.2x of 2")
	assert.True(t, settled([]taskPair{{190, 100}, {180, 100}, {200, 100}}, false), "no upper bound for a span")
}
