package qualify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/ledger"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// aiperfPoll is the stated polling cadence of AIPerf's video client in every run.
const aiperfPoll = 100 * time.Millisecond

// aiperfRun is what the aiperf stage established: every AIPerf request, accounted for and
// matched to its pinned input.
type aiperfRun struct {
	Requests []aiperfRequest
	PollMS   float64 // AIPerf's stated polling cadence (video only)
}

// aiperfRequest is one AIPerf request and what the server said of it.
type aiperfRequest struct {
	item       workItem
	Warmup     bool
	RequestID  string
	JobID      string
	LatencyMS  float64 // AIPerf's request_latency, when it recorded one (hasLatency)
	hasLatency bool
	creditNS   int64
	// TaskMS is the server's Task time for this request; 0 when it reports none.
	TaskMS float64
	// taskClaims are every report of the Task time the server made for this request, each a
	// claim the timing stage holds to the others and to the client's clock.
	taskClaims []check.TaskClaim
	timing     *api.Timing   // the server's parts of its time; nil when it reports none
	declared   ledger.Output // what the server declared of the artifact (digests), when it did
	actual     *api.Actual   // what the server reports it produced; nil when it reports nothing
	peakMB     float64
	raw        aiperf.RawRecord
}

var (
	aiperfOnce sync.Once
	aiperfEnv  aiperf.Env
	aiperfErr  error
)

// InstalledAIPerf is the pinned AIPerf, installed once per process under root (make installs
// it beforehand, so this normally only checks the metadata).
func InstalledAIPerf(root string) (aiperf.Env, error) {
	aiperfOnce.Do(func() {
		aiperfEnv, aiperfErr = aiperf.Ensure(context.Background(), aiperf.DefaultVenv(root), nil)
	})
	return aiperfEnv, aiperfErr
}

// aiperf is the stage "aiperf": the published AIPerf against the served checkpoint, one
// warmup and one measured request per pinned input, every request accounted for on the
// server (its ledger, or for an endpoint its own answers).
func (c *caseRun) aiperf(s *serving) (aiperfRun, string, error) {
	var run aiperfRun
	if s == nil {
		return run, "", errors.New("no server: the serve stage failed")
	}
	env, err := InstalledAIPerf(c.Config.Root)
	if err != nil {
		return run, "", check.Fail("aiperf-install", "%w", err)
	}
	items, err := c.items()
	if err != nil {
		return run, "", err
	}
	dir := filepath.Join(c.Dir, "aiperf")
	input, byPrompt, err := c.aiperfDataset(items)
	if err != nil {
		return run, "", err
	}
	tok, err := fixtures.WriteTokenizer(filepath.Join(c.Dir, "tokenizer"))
	if err != nil {
		return run, "", err
	}
	warmup, measured := c.Config.plan(len(items))
	if warmup < pinnedWarmup || measured < len(items) {
		why := fmt.Sprintf("quick run: %d warmup + %d measured requests, fewer than the pinned %d + %d", warmup, measured, pinnedWarmup, len(items))
		c.limit(spec.FamilyValidated, why)
		c.Row.Label += " (" + why + ")"
	}
	ar := aiperf.Run{
		Model: c.Entry.ID, URL: s.URL, Tokenizer: tok, InputFile: input, Extra: c.extraInputs(),
		Warmup: warmup, Requests: measured, Concurrency: c.Config.Concurrency, ArtifactDir: dir,
		PollInterval: aiperfPoll, RequestTimeout: c.requestDeadline(), APIKey: s.API.APIKey,
	}
	ar.Endpoint = aiperf.ImageEdit
	if c.Entry.Workload == spec.TextToVideo {
		ar.Endpoint = aiperf.VideoGeneration
		run.PollMS = ms(aiperfPoll)
	}
	c.Row.AIPerfCommand = ar.CommandLine("aiperf")
	c.Row.Versions["aiperf"] = env.Version
	// AIPerf exits non-zero when every request failed; its records still say which and why,
	// so they are accounted for before its exit status is.
	stopProgress := c.showProgress(s, func(f string, a ...any) { logf(c.T, f, a...) }, progressEvery)
	execErr := env.Exec(c.ctx, ar)
	stopProgress()
	x, err := aiperf.ReadExports(dir)
	for _, raw := range x.Raw {
		c.createdJobs(raw.JobID()) // before any check can fail: cleanup deletes them whatever happens
	}
	c.recordAIPerf(x)
	if err := check.AIPerfExports(err, execErr); err != nil {
		return run, "", err
	}
	if err := check.AIPerfVersion(x); err != nil {
		return run, "", err
	}
	reqs, entries, err := c.followUnfinished(s, x)
	if err != nil {
		return run, "", err
	}
	c.Row.Counts = countRequests(reqs)
	c.Row.Counts["planned_warmup"], c.Row.Counts["planned_measured"] = warmup, measured
	c.Row.Counts["pinned_warmup"], c.Row.Counts["pinned_measured"] = pinnedWarmup, len(items)
	if err := aiperf.Account(reqs, c.notOwn(entries)); err != nil {
		return run, "", errors.Join(check.Fail("aiperf-accounting", "%w", err), execErr)
	}
	pinned := func(p string) bool { _, ok := byPrompt[p]; return ok }
	if err := check.AIPerfRun(reqs, execErr, warmup, measured, pinned); err != nil {
		return run, "", err
	}
	run.Requests = requestsOf(reqs, byPrompt)
	how := "every request maps to exactly one server job"
	switch {
	case !s.External:
	case c.Entry.Workload != spec.TextToVideo:
		how = "every request answered on its own exchange (an edit has no job to join)"
	case c.tied() != "":
		how = fmt.Sprintf("every request maps to exactly one job the endpoint reports, joined on AIPerf's own record of each create's answer (the job id in it) for %d: the endpoint does not say which request made those jobs", len(c.untied))
	default:
		how = "every request maps to exactly one job the endpoint reports, each tied to its create by the endpoint itself (the create's X-Request-ID in the job's request_id, or answered to a poll sent with a fresh one)"
	}
	return run, fmt.Sprintf("AIPerf %s: %s (%d warmup, %d measured); %s", env.Version, aiperf.Summarize(reqs), warmup, measured, how), nil
}

// requestsOf is each accounted AIPerf request (every one completed, with its one terminal
// server line) with its pinned input and what the server said of it.
func requestsOf(reqs []aiperf.Request, byPrompt map[string]workItem) []aiperfRequest {
	var out []aiperfRequest
	for _, r := range reqs {
		prompt, _ := r.Raw.Payload["prompt"].(string)
		e := r.Server[0]
		q := aiperfRequest{item: byPrompt[prompt], Warmup: r.Warmup, RequestID: r.XRequestID, JobID: e.JobID,
			LatencyMS: r.LatencyMS, hasLatency: r.HasLatency, creditNS: r.CreditIssuedNS, raw: r.Raw}
		q.timing, q.taskClaims = e.Timing, taskClaims(r, e)
		if len(q.taskClaims) > 0 {
			q.TaskMS = q.taskClaims[0].MS
		}
		if e.Output != nil {
			q.declared, q.peakMB = *e.Output, e.Output.PeakMemoryMB
		}
		q.actual = e.Actual
		out = append(out, q)
	}
	return out
}

// taskClaims are the server's reports of a request's Task time: its timing's
// task_call_wall_ms (the ledger's, or an endpoint's answer) and its inference_time_s as AIPerf
// recorded it (video_inference_time), or as the edit answer AIPerf kept says it.
func taskClaims(r aiperf.Request, e ledger.Entry) []check.TaskClaim {
	var out []check.TaskClaim
	if e.Timing != nil && e.Timing.TaskCallWallMS != 0 {
		out = append(out, check.TaskClaim{From: "timing.task_call_wall_ms", MS: e.Timing.TaskCallWallMS})
	}
	if r.HasServerInference {
		return append(out, check.TaskClaim{From: "inference_time_s (AIPerf's video_inference_time)", MS: r.ServerInferenceMS})
	}
	for i := len(r.Raw.Responses) - 1; i >= 0; i-- {
		if s, ok := r.Raw.Body(i)["inference_time_s"].(float64); ok {
			return append(out, check.TaskClaim{From: "inference_time_s in the answer AIPerf kept", MS: s * 1000})
		}
	}
	return out
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

// progressEvery is how often a long AIPerf run reports the server's job progress.
const progressEvery = 15 * time.Second

// showProgress logs, every interval while AIPerf runs, each unfinished video job's status and
// progress as the server reports them, so a long GPU run shows it is moving. It returns the
// function that stops it.
func (c *caseRun) showProgress(s *serving, logf func(string, ...any), every time.Duration) func() {
	if c.Entry.Workload != spec.TextToVideo {
		return func() {}
	}
	ctx, cancel := context.WithCancel(c.ctx)
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
			jobs, err := s.API.ListVideos(ctx, 8)
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

// followUnfinished joins the run with the server's account of it; a job the server accepted
// but has not ended is followed to its end before the final join, so nothing is dropped. The
// unfinished jobs are followed together, bounded by one request timeout from now: a run whose
// every job hung waits that long once, not once a job.
func (c *caseRun) followUnfinished(s *serving, x aiperf.Exports) ([]aiperf.Request, []ledger.Entry, error) {
	entries, err := c.account(s, x)
	if err != nil {
		return nil, nil, err
	}
	reqs := aiperf.Join(x, entries)
	if c.Entry.Workload != spec.TextToVideo {
		return reqs, entries, nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	var wg sync.WaitGroup
	followed := false
	for _, r := range reqs {
		if r.Outcome == aiperf.Unfinished {
			wg.Go(func() { _, _, _ = s.API.WaitVideo(ctx, r.JobID) }) // its end, if any, reaches the account
			followed = true
		}
	}
	wg.Wait()
	if !followed {
		return reqs, entries, nil
	}
	if entries, err = c.account(s, x); err != nil {
		return nil, nil, err
	}
	reqs = aiperf.Join(x, entries)
	if ctx.Err() != nil {
		var hung []string
		for _, r := range reqs {
			if r.Outcome == aiperf.Unfinished {
				hung = append(hung, fmt.Sprintf("request %s: job %s", r.XRequestID, r.JobID))
			}
		}
		if len(hung) > 0 {
			d, from := RequestDeadline(c.Entry, c.Config)
			return nil, nil, check.Fail("deadline", "%d of %d requests still unfinished on the server after their deadline (%s: %s), followed together (%s):\n  %s",
				len(hung), len(reqs), d, from, aiperf.Summarize(reqs), strings.Join(hung, "\n  "))
		}
	}
	return reqs, entries, nil
}

// account is the server's account of the run: a launched mediaserve's ledger, or, for an
// endpoint (whose ledger, if any, is not ours to read), a terminal job line built from what
// the endpoint answers for each job AIPerf saw. Each job is polled with a fresh X-Request-ID,
// and the line is filed under the create's request id the endpoint names (the job's
// request_id, or the header it answers with), so a server that names another request fails
// the accounting; an endpoint that names none is joined on AIPerf's record of the create's
// answer alone, which the row says (untied). Every answer is kept for the contract's
// assessment.
func (c *caseRun) account(s *serving, x aiperf.Exports) ([]ledger.Entry, error) {
	if !s.External {
		return ledger.Read(s.ledgerPath)
	}
	var entries []ledger.Entry
	c.untied = nil
	for _, raw := range x.Raw {
		e := ledger.Entry{Event: "job", RequestID: raw.Meta.XRequestID, JobID: raw.JobID()}
		var body []byte
		if c.Entry.Workload == spec.TextToVideo {
			if e.JobID == "" {
				continue // neither a job nor a refusal: Join calls it lost
			}
			// Polled with a fresh X-Request-ID: an endpoint that mirrors the header it is sent
			// cannot pass that off as knowing which request made the job.
			method, path := s.Profile.Path(s.Profile.PollVideo, e.JobID)
			nonce := "poll-" + e.JobID
			ctx, echo := withRequestID(c.ctx, nonce)
			step, err := s.exchange(ctx, "poll", method, path, nil)
			if err != nil {
				return nil, err
			}
			var made struct {
				RequestID string `json:"request_id"`
			}
			_ = json.Unmarshal(step.Response.Body, &made)
			switch {
			case made.RequestID != "":
				e.RequestID = made.RequestID // the endpoint's own word on whose job this is
			case echo.got != "" && echo.got != nonce:
				e.RequestID = echo.got
			default:
				c.untied = append(c.untied, e.RequestID)
			}
			c.steps = append(c.steps, step)
			if step.Response.Status != http.StatusOK {
				continue
			}
			v, _, err := s.Profile.ParseVideo(step.Response.Body)
			if err != nil {
				return nil, err
			}
			if v.Status != api.StatusCompleted && v.Status != api.StatusFailed {
				continue // unfinished: no terminal line yet
			}
			e.Status, e.Error, body = v.Status, v.Error, step.Response.Body
		} else {
			if raw.Error != nil {
				continue // the client's error is kept by Join
			}
			if len(raw.Responses) == 0 {
				continue
			}
			body = []byte(raw.Responses[0].Text)
			c.steps = append(c.steps, editStep(body))
			e.Status = api.StatusCompleted
		}
		// mediaserve's own objects say more (timing parts, digests); other servers' do not.
		// A Task time reported only as inference_time_s is read from what AIPerf kept
		// (taskClaims), the suite's poll being a second reading of the same answer.
		var more struct {
			Timing       *api.Timing `json:"timing"`
			SHA256       string      `json:"sha256"`
			PeakMemoryMB float64     `json:"peak_memory_mb"`
			Actual       *api.Actual `json:"actual"`
		}
		if json.Unmarshal(body, &more) == nil {
			e.Timing = more.Timing
			e.Actual = more.Actual
			e.Output = &ledger.Output{SHA256: more.SHA256, PeakMemoryMB: more.PeakMemoryMB}
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// editStep keeps an edit AIPerf made as a wire.Step.
func editStep(body []byte) (st wire.Step) {
	st.Step = "edit"
	st.Request.Method, st.Request.Path = http.MethodPost, "/v1/images/edits"
	st.Response.Status, st.Response.Body = http.StatusOK, body
	return st
}

// aiperfDataset writes the single_turn JSONL AIPerf reads: the pinned prompts, and for
// image_edit the references as PNG files (AIPerf re-encodes local images; PNG keeps that
// lossless).
func (c *caseRun) aiperfDataset(items []workItem) (string, map[string]workItem, error) {
	path := filepath.Join(c.Dir, "aiperf-input.jsonl")
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
			ref := filepath.Join(c.Dir, "references", it.key+".png")
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

// extraInputs are the pinned settings as --extra-inputs, in a stable order. An edit names
// output_format png, the contract's default, which a server with another default (SGLang's
// image_api picks jpg) must then honour: the artifact checks hold the PNG to the raw frames.
func (c *caseRun) extraInputs() [][2]string {
	fields := c.Entry.Defaults.Fields(c.Entry.Controls, c.Entry.Workload)
	delete(fields, "prompt")
	if c.Entry.Workload == spec.ImageEdit {
		fields["output_format"] = "png"
	}
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

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// notOwn is entries without the jobs of the suite's own requests before AIPerf's (the shape
// probe): the accounting holds every other job line of the server against AIPerf's records.
func (c *caseRun) notOwn(entries []ledger.Entry) []ledger.Entry {
	out := make([]ledger.Entry, 0, len(entries))
	for _, e := range entries {
		if !slices.Contains(c.own, e.RequestID) {
			out = append(out, e)
		}
	}
	return out
}

// requestIDKey carries, in a request's context, the X-Request-ID serving.exchange sends and
// the one the server echoed.
type requestIDKey struct{}

type requestIDEcho struct{ sent, got string }

// withRequestID is ctx for an exchange that sends id as X-Request-ID; the echo reads what the
// server answered in the same header once the exchange is done ("" for none).
func withRequestID(ctx context.Context, id string) (context.Context, *requestIDEcho) {
	e := &requestIDEcho{sent: id}
	return context.WithValue(ctx, requestIDKey{}, e), e
}

// tied is the limit of an endpoint that does not say which request made a job (no request_id
// in the job, and a poll sent with a fresh X-Request-ID answered with none of the create's): its
// jobs are joined to AIPerf's requests on AIPerf's record of each create's answer alone.
func (c *caseRun) tied() string {
	if len(c.untied) == 0 {
		return ""
	}
	why := fmt.Sprintf("the endpoint does not say which request made %d jobs (request %s first): polled with a fresh X-Request-ID, the job names none of its create's, so they are joined on AIPerf's record of each create's answer alone, never on the server's own word",
		len(c.untied), c.untied[0])
	c.limit(spec.FamilyValidated, why)
	c.findings = append(c.findings, wire.Finding{Name: "no-request-tie", Detail: why})
	return why
}
