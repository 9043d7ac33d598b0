package aiperf

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/ledger"
)

func raw(id, phase, job string, err *ErrorDetails) RawRecord {
	r := RawRecord{Meta: metadata{XRequestID: id, Phase: phase}, Error: err}
	if job != "" {
		r.Responses = []RawResponse{{Text: `{"id":"` + job + `","status":"queued"}`}}
	}
	return r
}

func line(event, req, job, status string) ledger.Entry {
	e := ledger.Entry{Event: event, RequestID: req, JobID: job, Status: status}
	if status == "failed" || status == "rejected" {
		e.Error = &api.JobError{Code: "x", Message: "boom"}
	}
	return e
}

func TestJoinClassifiesEveryRequest(t *testing.T) {
	timeout := &ErrorDetails{Code: 504, Type: "TimeoutError", Message: "timed out"}
	x := Exports{
		Records: []Record{{Meta: metadata{XRequestID: "ok"}, Metrics: map[string]metric{"request_latency": {Value: 12.5}}}},
		Raw: []RawRecord{
			raw("warm", Warmup, "video_w", nil), raw("ok", Profiling, "video_1", nil),
			raw("fail", Profiling, "video_2", &ErrorDetails{Code: 500, Message: "Video generation failed"}),
			raw("slow", Profiling, "video_3", timeout), raw("busy", Profiling, "", &ErrorDetails{Code: 429}),
			raw("ghost", Profiling, "", timeout), raw("twice", Profiling, "video_5", nil), raw("swap", Profiling, "video_6", nil),
			raw("liar", Profiling, "video_7", timeout),
		},
	}
	entries := []ledger.Entry{
		line("job", "warm", "video_w", "completed"), line("job", "ok", "video_1", "completed"),
		line("job", "fail", "video_2", "failed"), line("rejected", "busy", "", "rejected"),
		line("job", "twice", "video_5", "completed"), line("job", "twice", "video_5", "completed"),
		line("job", "swap", "video_9", "completed"), line("job", "liar", "video_7", "completed"),
		line("job", "stranger", "video_8", "completed"),
	}
	reqs := Join(x, entries)
	got := map[string]string{}
	for _, q := range reqs {
		got[q.XRequestID] = q.Outcome
	}
	assert.Equal(t, map[string]string{"warm": Completed, "ok": Completed, "fail": Failed, "slow": Unfinished, "busy": Rejected,
		"ghost": Lost, "twice": Mismatch, "swap": Mismatch, "liar": Mismatch}, got)
	for _, q := range reqs {
		if q.XRequestID == "ok" {
			assert.Equal(t, 12.5, q.LatencyMS)
			assert.True(t, q.HasLatency)
		} else {
			assert.False(t, q.HasLatency, "%s: no request_latency recorded, not 0 ms", q.XRequestID)
		}
		if q.XRequestID == "warm" {
			assert.True(t, q.Warmup)
		}
	}
	p := Problems(reqs, entries)
	assert.Len(t, p, 8, "seven requests plus the server job no request explains")
	assert.Contains(t, p[len(p)-1], "video_8")
	assert.NoError(t, Account(reqs[:2], entries[:2]))
}

func TestCommandLineIsPasteable(t *testing.T) {
	r := Run{Model: "ref-t2v", URL: "http://127.0.0.1:1", Endpoint: VideoGeneration, Tokenizer: "/tok", InputFile: "/in.jsonl",
		Extra: [][2]string{{"size", "320x192"}, {"guidance_scale", "5"}}, Warmup: 1, Requests: 4, Concurrency: 1,
		ArtifactDir: "/out dir", PollInterval: 100_000_000, APIKey: "secret"}
	cl := r.CommandLine("aiperf")
	assert.Contains(t, cl, "AIPERF_HTTP_VIDEO_POLL_INTERVAL=0.1 ")
	assert.Contains(t, cl, "--extra-inputs size:320x192 --extra-inputs guidance_scale:5")
	assert.Contains(t, cl, "--download-video-content")
	assert.Contains(t, cl, "--artifact-dir '/out dir'")
	assert.Contains(t, cl, "--api-key '<key>'")
	assert.NotContains(t, cl, "secret")
}
