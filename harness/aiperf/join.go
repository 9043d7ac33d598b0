package aiperf

import (
	"fmt"
	"sort"
	"strings"

	"github.com/mediaqual/mediaqual/harness/ledger"
)

// Outcomes of an accounted request.
const (
	Completed  = "completed"  // the client succeeded and the server's one terminal line says completed
	Failed     = "failed"     // the job ended failed (the server's error is kept)
	Unfinished = "unfinished" // the server accepted a job that has no terminal line (yet)
	Rejected   = "rejected"   // the server refused the request (its rejected line is kept)
	Lost       = "lost"       // neither a job nor a refusal on the server for this request id
	Mismatch   = "mismatch"   // the two sides disagree (several lines, another job, or client error on a completed job)
)

// Request is one AIPerf request set against the server's ledger by X-Request-ID.
type Request struct {
	XRequestID string
	Warmup     bool
	LatencyMS  float64 // client end-to-end, from profile_export.jsonl; meaningful only when HasLatency
	// HasLatency says AIPerf recorded a request_latency for the request: a record without one
	// (or no record at all) has no client time, which must never read as 0 ms.
	HasLatency     bool
	CreditIssuedNS int64 // when AIPerf issued it: the send time (record start times are shifted)
	// ServerInferenceMS is the server's Task time as AIPerf recorded it (video_inference_time),
	// when it did (HasServerInference): a second reading of the server's claim.
	ServerInferenceMS  float64
	HasServerInference bool
	ClientError        *ErrorDetails
	JobID              string // the server's id as AIPerf saw it
	Raw                RawRecord
	Server             []ledger.Entry // the server's terminal job lines, or its rejected line
	Outcome            string
	Why                string // for anything but Completed
}

// Join accounts for every AIPerf request on the server: each must map to exactly one terminal
// job line (or one refusal) under its X-Request-ID. Nothing is dropped: a request the server
// never saw is Lost, a job without a terminal line is Unfinished, and every failure keeps both
// sides' errors.
func Join(x Exports, entries []ledger.Entry) []Request {
	byID := map[string]Record{}
	for _, r := range x.Records {
		byID[r.Meta.XRequestID] = r
	}
	var out []Request
	for _, raw := range x.Raw {
		q := Request{XRequestID: raw.Meta.XRequestID, Warmup: raw.Meta.Phase == Warmup, CreditIssuedNS: raw.Meta.CreditIssuedNS,
			ClientError: raw.Error, JobID: raw.JobID(), Raw: raw}
		if rec, ok := byID[q.XRequestID]; ok {
			q.LatencyMS, q.HasLatency = rec.LatencyMS()
			q.ServerInferenceMS, q.HasServerInference = rec.ServerInferenceMS()
			if q.ClientError == nil {
				q.ClientError = rec.Error
			}
		}
		q.Server = ledger.Terminal(entries, q.XRequestID)
		var rejected []ledger.Entry
		for _, e := range entries {
			if e.Event == "rejected" && e.RequestID == q.XRequestID {
				rejected = append(rejected, e)
			}
		}
		q.Outcome, q.Why = classify(q, rejected)
		if q.Outcome == Rejected {
			q.Server = rejected
		}
		out = append(out, q)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreditIssuedNS < out[j].CreditIssuedNS })
	return out
}

func classify(q Request, rejected []ledger.Entry) (string, string) {
	switch n := len(q.Server); {
	case n > 1:
		return Mismatch, fmt.Sprintf("%d terminal job lines for one request", n)
	case n == 0 && len(rejected) > 0:
		return Rejected, fmt.Sprintf("server refused it: %s", jobErr(rejected[0]))
	case n == 0 && q.JobID != "":
		return Unfinished, fmt.Sprintf("job %s has no terminal ledger line; client: %s", q.JobID, orNone(q.ClientError.String()))
	case n == 0:
		return Lost, fmt.Sprintf("no job or refusal on the server; client: %s", orNone(q.ClientError.String()))
	}
	e := q.Server[0]
	switch {
	case q.JobID != "" && e.JobID != q.JobID:
		return Mismatch, fmt.Sprintf("client saw job %s, the ledger's line is for %s", q.JobID, e.JobID)
	case e.Status == "failed":
		return Failed, fmt.Sprintf("job %s failed: %s; client: %s", e.JobID, jobErr(e), orNone(q.ClientError.String()))
	case e.Status != "completed":
		return Mismatch, fmt.Sprintf("job %s ended %s", e.JobID, e.Status)
	case q.ClientError != nil:
		return Mismatch, fmt.Sprintf("job %s completed but the client recorded %s", e.JobID, q.ClientError)
	}
	return Completed, ""
}

func jobErr(e ledger.Entry) string {
	if e.Error == nil {
		return "no error recorded"
	}
	return e.Error.Code + ": " + e.Error.Message
}

func orNone(s string) string {
	if s == "" {
		return "no error"
	}
	return s
}

// Problems names every request that is not Completed, by X-Request-ID, and checks that the
// server has no job line from this run that no request explains.
func Problems(reqs []Request, entries []ledger.Entry) []string {
	var out []string
	known := map[string]bool{}
	for _, q := range reqs {
		known[q.XRequestID] = true
		if q.Outcome != Completed {
			phase := "measured"
			if q.Warmup {
				phase = "warmup"
			}
			out = append(out, fmt.Sprintf("%s request %s %s: %s", phase, q.XRequestID, q.Outcome, q.Why))
		}
	}
	for _, e := range entries {
		if e.Event == "job" && !known[e.RequestID] {
			out = append(out, fmt.Sprintf("server job %s (request %s) matches no AIPerf record", e.JobID, e.RequestID))
		}
	}
	return out
}

// Summarize is a one-line count by outcome.
func Summarize(reqs []Request) string {
	n := map[string]int{}
	for _, q := range reqs {
		n[q.Outcome]++
	}
	var parts []string
	for _, k := range []string{Completed, Failed, Unfinished, Rejected, Lost, Mismatch} {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[k], k))
		}
	}
	return strings.Join(parts, ", ")
}
