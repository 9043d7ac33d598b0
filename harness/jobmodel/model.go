// Package jobmodel is the media job API as a model: the rules every exchange with a server
// must keep (job states and their transitions, identity, timestamps, content, deletion,
// listing, the workload's fields), written once as data (Transitions, Rules), a History of
// every exchange the suite makes with its own send and receive times, and Check, which holds a
// history to the rules and names each rule's first violation with the exchanges that make it.
// It trusts nothing a server says about itself: a job object's times are held to the client's
// clock, its id to the request's, a list to what the suite created and deleted. The anchors are
// Porcupine's and Jepsen's: a model, a recorded history, a checker separate from what produced
// the history.
package jobmodel

import (
	"github.com/mediaqual/mediaqual/harness/api"
)

// Transitions are the job statuses and those each may be followed by on a later answer: a
// terminal status stays terminal.
var Transitions = map[string][]string{
	api.StatusQueued:     {api.StatusQueued, api.StatusInProgress, api.StatusCompleted, api.StatusFailed},
	api.StatusInProgress: {api.StatusInProgress, api.StatusCompleted, api.StatusFailed},
	api.StatusCompleted:  {api.StatusCompleted},
	api.StatusFailed:     {api.StatusFailed},
}

// Rule is one rule of the API: the check that fails when it is broken, what it says, the
// server bug it is for, the mediaserve fault that shows it failing (docs/FAULTS.md), and what
// a history must hold for it to say anything (Needs: where a server cannot say it, the rule is
// a named limit, never a pass).
type Rule struct {
	Check string
	Says  string
	For   string
	Fault string
	Edits bool // the rule holds image edits too, not only video jobs
	hold  func(*view) (*Violation, string)
}

// Rules are the model, in the order docs/QUALIFICATION.md's table shows them. Each rule's
// hold returns its first violation, or why the history cannot hold the server to it ("" when
// it could).
var Rules = []Rule{
	{
		Check: "job-identity",
		Says:  "every job object answered for id X has id X and names the model its create asked (and, where it says one, the create's request id); each create is answered with a job of its own",
		For:   "a poll answered with another job's object (a cache keyed wrongly, a gateway mixing up jobs)",
		Fault: "poll-other-job",
		Edits: true,
		hold:  holdIdentity,
	},
	{
		Check: "job-status",
		Says:  "statuses follow Transitions (terminal stays terminal); progress is within 0..100 and never goes back",
		For:   "a completed job reported in_progress again (a status read from a stale replica)",
		Fault: "status-regresses",
		hold:  holdStatus,
	},
	{
		Check: "job-timestamps",
		Says:  "created_at within the create's send and answer, completed_at after created_at, after the job was last seen unfinished and before it was first seen completed, expires_at after completed_at; none changes once set (a stated clock skew allowed)",
		For:   "completed_at written in milliseconds where the contract has seconds",
		Fault: "completed-at-ms",
		hold:  holdTimestamps,
	},
	{
		Check: "job-content",
		Says:  "content is answered 4xx before completion; from completion until expires_at or a delete, every fetch answers the same bytes",
		For:   "content served from the file while the job is still writing it",
		Fault: "content-early",
		hold:  holdContent,
	},
	{
		Check: "job-deleted",
		Says:  "after a delete is answered, the job is neither pollable, nor its content fetchable, nor listed",
		For:   "a delete that removes the job from its store but not from the list's index",
		Fault: "delete-still-listed",
		hold:  holdDeleted,
	},
	{
		Check: "job-orphans",
		Says:  "the jobs listed after the run are those listed before plus those the suite and AIPerf created, less those deleted: any other is an orphan, any missing one lost",
		For:   "a gateway that runs every create twice, leaving an orphan job running",
		Fault: "double-create",
		hold:  holdListing,
	},
	{
		Check: "job-fields",
		Says:  "a job object's size, seconds and prompt are the ones its create asked (seconds is num_frames/fps)",
		For:   "a job object echoing a default (seconds \"4\") instead of the clip asked",
		Fault: "seconds-wrong",
		hold:  holdFields,
	},
}

// Violation is a broken rule: its check, what was seen, and the exchanges that show it.
type Violation struct {
	Check  string
	Detail string
	Ops    []Op
}

func (v Violation) Error() string {
	s := v.Detail
	for _, o := range v.Ops {
		s += "\n    " + o.String()
	}
	return s
}
