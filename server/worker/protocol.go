package worker

import (
	"github.com/mediaqual/mediaqual/models/spec"
)

// Protocol lines.

type runLine struct {
	Op        string        `json:"op"`
	ID        string        `json:"id"`
	Settings  spec.Settings `json:"settings"`
	Reference string        `json:"reference,omitempty"`
	Output    string        `json:"output"`
}

type cancelLine struct {
	Op string `json:"op"`
	ID string `json:"id"`
}

// badLine is a synthetic event for a job's line that did not parse.
const badLine = "\x00bad"

type envelope struct {
	Event string `json:"event"`
	ID    string `json:"id"`
}

type message struct {
	Event        string             `json:"event"`
	ID           string             `json:"id"`
	Precision    string             `json:"precision"`
	PID          int                `json:"pid"`
	Message      string             `json:"message"`
	Code         string             `json:"code"`
	Param        string             `json:"param"` // of an error: the run op's field at fault
	Done         int                `json:"done"`
	Total        int                `json:"total"`
	Frames       int                `json:"frames"`
	Width        int                `json:"width"`
	Height       int                `json:"height"`
	Actual       spec.Actual        `json:"actual"`
	Parity       *spec.Parity       `json:"parity"` // of ready: the worker's parity check at load
	TaskWallMS   float64            `json:"task_wall_ms"`
	PhasesMS     map[string]float64 `json:"phases_ms"`
	PeakMemoryMB float64            `json:"peak_memory_mb"`

	malformed string // a frames line that did not parse: why
	overlong  bool   // a badLine for a line over maxLine: the job may still run
}

type job struct {
	id   string
	ch   chan message
	done chan struct{} // closed when Run stops listening
}
