package mediaqual_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"mediaqual/fixtures"
	"mediaqual/harness/aiperf"
	"mediaqual/harness/api"
	"mediaqual/harness/ledger"
	"mediaqual/models/spec"
)

// aiperfPoll is the stated polling cadence of AIPerf's video client in every run.
const aiperfPoll = 100 * time.Millisecond

// requestTimeout bounds each AIPerf request and the follow-up of an unfinished job:
// MEDIAQUAL_REQUEST_TIMEOUT (a Go duration), 30 minutes by default.
func requestTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MEDIAQUAL_REQUEST_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return 30 * time.Minute
}

// concurrency is AIPerf's: MEDIAQUAL_CONCURRENCY, 1 by default (one request at a time, so
// latency is not queueing).
func concurrency() int {
	if n, err := strconv.Atoi(os.Getenv("MEDIAQUAL_CONCURRENCY")); err == nil && n > 0 {
		return n
	}
	return 1
}

// pinnedWarmup is the pinned AIPerf warmup: one request; the pinned measured run is one
// request per pinned input.
const pinnedWarmup = 1

// requestPlan is how many warmup and measured requests this run sends: the pinned counts,
// unless MEDIAQUAL_WARMUP_REQUESTS or MEDIAQUAL_MEASURED_REQUESTS ask for a quick run (fewer
// measured requests cycle through the first inputs).
func requestPlan(inputs int) (warmup, measured int, err error) {
	warmup, measured = pinnedWarmup, inputs
	for _, v := range []struct {
		env string
		n   *int
		min int
	}{{"MEDIAQUAL_WARMUP_REQUESTS", &warmup, 0}, {"MEDIAQUAL_MEASURED_REQUESTS", &measured, 1}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < v.min {
				return 0, 0, fmt.Errorf("%s=%q: want an integer of at least %d", v.env, s, v.min)
			}
			*v.n = n
		}
	}
	return warmup, measured, nil
}

// servedRequest is one AIPerf request, accounted for and matched to its pinned input.
type servedRequest struct {
	item      workItem
	warmup    bool
	requestID string
	jobID     string
	latencyMS float64 // AIPerf's request_latency
	creditNS  int64
	taskMS    float64 // the server's Task-call wall for this request
	timing    api.Timing
	peakMB    float64
	psnr      float64 // of the decoded artifact against its raw frames, when measured
	raw       aiperf.RawRecord
	path      string // the fetched artifact
	sha256    string
	decoded   []string // digests of its decoded frames
}

var (
	aiperfOnce sync.Once
	aiperfEnv  aiperf.Env
	aiperfErr  error
)

// installedAIPerf is the pinned AIPerf, installed once per test binary (make installs it
// beforehand, so this normally only checks the metadata).
func installedAIPerf() (aiperf.Env, error) {
	aiperfOnce.Do(func() {
		root, err := os.Getwd()
		if err != nil {
			aiperfErr = err
			return
		}
		aiperfEnv, aiperfErr = aiperf.Ensure(context.Background(), aiperf.DefaultVenv(root), nil)
	})
	return aiperfEnv, aiperfErr
}

// aiperfStage runs the published AIPerf against the served checkpoint: one warmup and one
// measured request per pinned input, then accounts for every request in the server ledger.
func (q *qualification) aiperfStage(t *testing.T) (string, error) {
	if q.server == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	env, err := installedAIPerf()
	if err != nil {
		return "", fmt.Errorf("check aiperf-install: %w", err)
	}
	items, err := q.items()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(q.dir, "aiperf")
	input, byPrompt, err := q.aiperfDataset(items)
	if err != nil {
		return "", err
	}
	tok, err := fixtures.WriteTokenizer(filepath.Join(q.dir, "tokenizer"))
	if err != nil {
		return "", err
	}
	warmup, measured, err := requestPlan(len(items))
	if err != nil {
		return "", err
	}
	if warmup < pinnedWarmup || measured < len(items) {
		why := fmt.Sprintf("quick run: %d warmup + %d measured requests, fewer than the pinned %d + %d", warmup, measured, pinnedWarmup, len(items))
		q.limit(spec.FamilyValidated, why)
		q.row.Label += " (" + why + ")"
	}
	run := aiperf.Run{
		Model: q.entry.ID, URL: q.server.srv.URL, Tokenizer: tok, InputFile: input, Extra: q.extraInputs(),
		Warmup: warmup, Requests: measured, Concurrency: concurrency(), ArtifactDir: dir,
		PollInterval: aiperfPoll, RequestTimeout: requestTimeout(),
	}
	run.Endpoint = aiperf.ImageEdit
	if q.entry.Workload == spec.TextToVideo {
		run.Endpoint = aiperf.VideoGeneration
		q.pollMS = ms(aiperfPoll)
	}
	q.row.AIPerfCommand = run.CommandLine("aiperf")
	q.row.Versions["aiperf"] = env.Version
	// AIPerf exits non-zero when every request failed; its records still say which and why,
	// so they are accounted for before its exit status is.
	stopProgress := q.showProgress(t.Logf, progressEvery)
	execErr := env.Exec(q.ctx, run)
	stopProgress()
	x, err := aiperf.ReadExports(dir)
	if err != nil {
		return "", errors.Join(execErr, err)
	}
	if err := checkVersion(x); err != nil {
		return "", err
	}
	reqs, entries, err := q.followUnfinished(x)
	if err != nil {
		return "", err
	}
	q.row.Counts = countRequests(reqs)
	q.row.Counts["planned_warmup"], q.row.Counts["planned_measured"] = warmup, measured
	q.row.Counts["pinned_warmup"], q.row.Counts["pinned_measured"] = pinnedWarmup, len(items)
	if err := aiperf.Account(reqs, entries); err != nil {
		return "", errors.Join(err, execErr)
	}
	if err := checkRun(reqs, execErr, warmup, measured, byPrompt); err != nil {
		return "", err
	}
	for _, r := range reqs {
		prompt, _ := r.Raw.Payload["prompt"].(string)
		it := byPrompt[prompt]
		e := r.Server[0]
		q.served = append(q.served, servedRequest{item: it, warmup: r.Warmup, requestID: r.XRequestID, jobID: e.JobID,
			latencyMS: r.LatencyMS, creditNS: r.CreditIssuedNS, taskMS: e.Timing.TaskCallWallMS, timing: *e.Timing, peakMB: e.Output.PeakMemoryMB, raw: r.Raw})
	}
	return fmt.Sprintf("AIPerf %s: %s (%d warmup, %d measured); every request maps to exactly one server job", env.Version, aiperf.Summarize(reqs), warmup, measured), nil
}

func countRequests(reqs []aiperf.Request) map[string]int {
	c := map[string]int{"requests": len(reqs)}
	for _, r := range reqs {
		if r.Warmup {
			c["warmup"]++
		} else {
			c["measured"]++
		}
		if r.Outcome != aiperf.Completed {
			c["errors"]++
		}
	}
	return c
}

// checkVersion holds the run's own report of its version to the pin (an aborted run has none).
func checkVersion(x aiperf.Exports) error {
	if x.HasSummary && x.Summary.Version != aiperf.Version {
		return fmt.Errorf("check aiperf-version: the run reports %s, pinned %s", x.Summary.Version, aiperf.Version)
	}
	return nil
}

// checkRun holds a fully accounted AIPerf run to its plan: a clean exit, the planned warmup
// and measured requests (pinned: one warmup and one per pinned input), and nothing sent but
// the pinned inputs.
func checkRun(reqs []aiperf.Request, execErr error, warmup, measured int, byPrompt map[string]workItem) error {
	if execErr != nil {
		return fmt.Errorf("check aiperf-exit: every request is accounted for, yet %w", execErr)
	}
	c := countRequests(reqs)
	if c["warmup"] != warmup || c["measured"] != measured {
		return fmt.Errorf("check aiperf-counts: %d warmup and %d measured records, want %d and %d", c["warmup"], c["measured"], warmup, measured)
	}
	for _, r := range reqs {
		prompt, _ := r.Raw.Payload["prompt"].(string)
		if _, ok := byPrompt[prompt]; !ok {
			return fmt.Errorf("check aiperf-inputs: request %s sent prompt %q, which is not a pinned input", r.XRequestID, prompt)
		}
	}
	return nil
}

// progressEvery is how often a long AIPerf run reports the server's job progress.
const progressEvery = 15 * time.Second

// showProgress logs, every interval while AIPerf runs, each unfinished video job's status and
// progress as the server reports them, so a long GPU run shows it is moving. It returns the
// function that stops it.
func (q *qualification) showProgress(logf func(string, ...any), every time.Duration) func() {
	if q.entry.Workload != spec.TextToVideo {
		return func() {}
	}
	ctx, cancel := context.WithCancel(q.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			jobs, err := q.server.api.ListVideos(ctx, 8)
			if err != nil {
				continue // the run's own accounting reports a server that stops answering
			}
			for _, v := range jobs {
				if !v.Terminal() {
					logf("progress: %s %s %d%%", v.ID, v.Status, v.Progress)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// followUnfinished joins the run with the ledger; a job the server accepted but has not ended
// is followed to its end (bounded) before the final join, so nothing is dropped.
func (q *qualification) followUnfinished(x aiperf.Exports) ([]aiperf.Request, []ledger.Entry, error) {
	entries, err := ledger.Read(q.server.ledgerPath)
	if err != nil {
		return nil, nil, err
	}
	reqs := aiperf.Join(x, entries)
	followed := false
	for _, r := range reqs {
		if r.Outcome == aiperf.Unfinished && q.entry.Workload == spec.TextToVideo {
			ctx, cancel := context.WithTimeout(q.ctx, requestTimeout())
			_, _, _ = q.server.api.WaitVideo(ctx, r.JobID) // its end, if any, reaches the ledger
			cancel()
			followed = true
		}
	}
	if !followed {
		return reqs, entries, nil
	}
	if entries, err = ledger.Read(q.server.ledgerPath); err != nil {
		return nil, nil, err
	}
	return aiperf.Join(x, entries), entries, nil
}

// aiperfDataset writes the single_turn JSONL AIPerf reads: the pinned prompts, and for
// image_edit the references as PNG files (AIPerf re-encodes local images; PNG keeps that
// lossless).
func (q *qualification) aiperfDataset(items []workItem) (string, map[string]workItem, error) {
	path := filepath.Join(q.dir, "aiperf-input.jsonl")
	f, err := os.Create(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	byPrompt := map[string]workItem{}
	for _, it := range items {
		line := map[string]string{"text": it.fields["prompt"]}
		if it.ref != nil {
			ref := filepath.Join(q.dir, "references", it.key+".png")
			if err := os.MkdirAll(filepath.Dir(ref), 0o755); err != nil {
				return "", nil, err
			}
			if err := os.WriteFile(ref, it.ref, 0o644); err != nil {
				return "", nil, err
			}
			line["image"] = ref
		}
		if _, dup := byPrompt[line["text"]]; dup {
			return "", nil, fmt.Errorf("fixture prompts must be unique to match requests to inputs: %q", line["text"])
		}
		byPrompt[line["text"]] = it
		if err := enc.Encode(line); err != nil {
			return "", nil, err
		}
	}
	return path, byPrompt, f.Close()
}

// extraInputs are the pinned settings as --extra-inputs, in a stable order.
func (q *qualification) extraInputs() [][2]string {
	fields := q.entry.Defaults.Fields(q.entry.Controls, q.entry.Workload)
	delete(fields, "prompt")
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][2]string, len(keys))
	for i, k := range keys {
		out[i] = [2]string{k, fields[k]}
	}
	return out
}

// editImage is the edited PNG AIPerf received, from the response body it kept.
func editImage(raw aiperf.RawRecord) ([]byte, error) {
	data, _ := raw.Body(0)["data"].([]any)
	if len(data) != 1 {
		return nil, fmt.Errorf("check edit-response: want one image in data, got %d", len(data))
	}
	b64, _ := data[0].(map[string]any)["b64_json"].(string)
	img, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(img) == 0 {
		return nil, fmt.Errorf("check edit-response: data[0].b64_json: %v", err)
	}
	return img, nil
}
