// Package ledger reads a server's request ledger (JSON lines, docs/API.md "Request ledger") so
// the suite can account for every request by its identity. Lines are read through the
// harness's own Entry, which follows the documented shape, not through the server's Go type.
package ledger

import (
	"time"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/internal/jsonl"
)

// Entry is one ledger line.
type Entry struct {
	Time          time.Time         `json:"time"`
	Event         string            `json:"event"` // job | rejected | delete | expire
	RequestID     string            `json:"request_id"`
	CorrelationID string            `json:"correlation_id,omitempty"`
	Route         string            `json:"route"`
	Model         string            `json:"model,omitempty"`
	JobID         string            `json:"job_id,omitempty"`
	Lane          *int              `json:"lane,omitempty"`         // which of the model's lanes ran the job
	LaneDevices   string            `json:"lane_devices,omitempty"` // that lane's devices (CUDA ids), when the server names them
	Layout        string            `json:"layout,omitempty"`       // the GPU layout the lane runs, for a model that offers layouts
	Status        string            `json:"status"`                 // completed | failed | cancelled | rejected | deleted | expired
	HTTPStatus    int               `json:"http_status,omitempty"`
	Error         *api.JobError     `json:"error,omitempty"`
	Settings      *api.Settings     `json:"settings,omitempty"`
	Inputs        map[string]string `json:"inputs,omitempty"` // prompt_sha256, reference_sha256, reference_size
	Output        *Output           `json:"output,omitempty"`
	Actual        *api.Actual       `json:"actual,omitempty"`
	Timing        *api.Timing       `json:"timing,omitempty"`
	FilesRemoved  []string          `json:"files_removed,omitempty"`
}

// Output digests a job's artifact and the raw frames it was encoded from.
type Output struct {
	SHA256       string  `json:"sha256"`
	Bytes        int64   `json:"bytes"`
	FramesSHA256 string  `json:"frames_sha256"`
	PeakMemoryMB float64 `json:"peak_memory_mb"`
}

// Read parses the ledger at path; blank lines are skipped, anything else malformed is an error.
func Read(path string) ([]Entry, error) { return jsonl.Read[Entry](path) }

// Terminal returns the terminal job lines ("job" events) of requestID.
func Terminal(entries []Entry, requestID string) []Entry {
	var out []Entry
	for _, e := range entries {
		if e.Event == "job" && e.RequestID == requestID {
			out = append(out, e)
		}
	}
	return out
}
