package aiperf

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaqual/mediaqual/internal/jsonl"
)

// Phases of a record.
const (
	Warmup    = "warmup"
	Profiling = "profiling"
)

// ErrorDetails is a record's error as AIPerf writes it.
type ErrorDetails struct {
	Code    int    `json:"code"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

func (e *ErrorDetails) String() string {
	if e == nil {
		return ""
	}
	return fmt.Sprintf("%d %s: %s", e.Code, e.Type, e.Message)
}

type metadata struct {
	XRequestID     string `json:"x_request_id"`
	XCorrelationID string `json:"x_correlation_id"`
	Phase          string `json:"benchmark_phase"`
	CreditIssuedNS int64  `json:"credit_issued_ns"`
}

type metric struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// Record is one line of profile_export.jsonl.
type Record struct {
	Meta    metadata          `json:"metadata"`
	Metrics map[string]metric `json:"metrics"`
	Error   *ErrorDetails     `json:"error"`
}

// LatencyMS is the client's end-to-end latency (submit to completed, without the download).
func (r Record) LatencyMS() (float64, bool) {
	m, ok := r.Metrics["request_latency"]
	return m.Value, ok
}

// ServerInferenceMS is the Task time the server reported as AIPerf read it (its
// video_inference_time, from the response's inference_time_s), in ms; ok is false when AIPerf
// recorded none (an edit, or a server that reports none) or in a unit it does not know.
func (r Record) ServerInferenceMS() (ms float64, ok bool) {
	m, ok := r.Metrics["video_inference_time"]
	switch {
	case !ok:
		return 0, false
	case m.Unit == "ms":
		return m.Value, true
	case m.Unit == "s" || m.Unit == "sec":
		return m.Value * 1000, true
	}
	return 0, false
}

// RawResponse is one response AIPerf kept: for video the submit answer and the final poll.
type RawResponse struct {
	PerfNS      int64  `json:"perf_ns"`
	Text        string `json:"text"`
	ContentType string `json:"content_type"`
}

// RawRecord is one line of profile_export_raw.jsonl.
type RawRecord struct {
	Meta      metadata       `json:"metadata"`
	Status    int            `json:"status"`
	Payload   map[string]any `json:"payload"`
	Responses []RawResponse  `json:"responses"`
	Error     *ErrorDetails  `json:"error"`
}

// Body decodes response i as JSON, or returns nil.
func (r RawRecord) Body(i int) map[string]any {
	if i < 0 || i >= len(r.Responses) {
		return nil
	}
	var m map[string]any
	if json.Unmarshal([]byte(r.Responses[i].Text), &m) != nil {
		return nil
	}
	return m
}

// JobID is the server's id from the first response (the submit answer, or the edit's body).
func (r RawRecord) JobID() string {
	id, _ := r.Body(0)["id"].(string)
	return id
}

// Summary is what the suite reads of profile_export_aiperf.json.
type Summary struct {
	Version      string `json:"aiperf_version"`
	Schema       string `json:"schema_version"`
	RequestCount struct {
		Avg float64 `json:"avg"`
	} `json:"request_count"`
	ErrorSummary []struct {
		Details ErrorDetails `json:"error_details"`
		Count   int          `json:"count"`
	} `json:"error_summary"`
	WasCancelled bool `json:"was_cancelled"`
}

// Exports are the files of one run.
type Exports struct {
	Records []Record
	Raw     []RawRecord
	Summary Summary
	// HasSummary is false when AIPerf aborted before writing its summary (it does when every
	// request failed); the per-request records are still there and still accounted for.
	HasSummary bool
}

// ReadExports reads a run's artifact directory. When AIPerf aborted before merging its raw
// records, they are read from the per-processor files it left in raw_records/.
func ReadExports(dir string) (Exports, error) {
	var x Exports
	var err error
	if x.Records, err = jsonl.Read[Record](filepath.Join(dir, "profile_export.jsonl")); err != nil {
		return x, err
	}
	merged := filepath.Join(dir, "profile_export_raw.jsonl")
	if _, err := os.Stat(merged); err == nil {
		if x.Raw, err = jsonl.Read[RawRecord](merged); err != nil {
			return x, err
		}
	} else {
		parts, _ := filepath.Glob(filepath.Join(dir, "raw_records", "*.jsonl"))
		if len(parts) == 0 {
			return x, fmt.Errorf("%s: no raw records (neither profile_export_raw.jsonl nor raw_records/)", dir)
		}
		for _, p := range parts {
			raw, err := jsonl.Read[RawRecord](p)
			if err != nil {
				return x, err
			}
			x.Raw = append(x.Raw, raw...)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "profile_export_aiperf.json"))
	if errors.Is(err, os.ErrNotExist) {
		return x, nil
	}
	if err != nil {
		return x, err
	}
	if err := json.Unmarshal(b, &x.Summary); err != nil {
		return x, fmt.Errorf("profile_export_aiperf.json: %w", err)
	}
	x.HasSummary = true
	return x, nil
}
