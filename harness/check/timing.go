package check

import (
	"fmt"
	"math"
	"strings"

	"github.com/mediaqual/mediaqual/harness/api"
)

// The checks of what a server reports of its own time. Each figure is a claim: it is held to
// the server's other figures for the same job and to the client's clock, the one source the
// server cannot set.

// TaskClaim is one report of a job's Task time, in ms, and where it was read.
type TaskClaim struct {
	From string // e.g. "timing.task_call_wall_ms", "inference_time_s (AIPerf's video_inference_time)"
	MS   float64
}

// taskTolerance is how far two reports of one Task time may differ: 0.5 ms and 0.5 %
// (mediaserve reports both from one duration, rounded to the microsecond).
func taskTolerance(a, b float64) float64 { return 0.5 + 0.005*max(math.Abs(a), math.Abs(b)) }

// TaskBounds holds each report of a job's Task time to the client's clock (check "task-wall"):
// a Task that is not a number, negative, or longer than the whole request the client timed
// (the Task runs inside it, and a longer one would make the overhead negative and its budget
// unfailable) is a wrong figure.
func TaskBounds(claims []TaskClaim, latencyMS float64) error {
	for _, c := range claims {
		switch {
		case math.IsNaN(c.MS) || math.IsInf(c.MS, 0):
			return fail("task-wall", "%s is %v", c.From, c.MS)
		case c.MS < 0:
			return fail("task-wall", "%s is %.1f ms: a Task cannot take negative time", c.From, c.MS)
		case c.MS > latencyMS:
			return fail("task-wall", "%s is %.1f ms, for a request the client timed at %.1f ms in all", c.From, c.MS, latencyMS)
		}
	}
	return nil
}

// TaskAgrees holds a job's reports of its Task time to each other (check "task-time-agrees":
// inference_time_s in ms where s is meant, or half the Task, for two). It returns the Task
// time, the first report's; 0 without one.
func TaskAgrees(claims []TaskClaim) (float64, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	for _, c := range claims[1:] {
		if d := math.Abs(c.MS - claims[0].MS); d > taskTolerance(c.MS, claims[0].MS) {
			return 0, fail("task-time-agrees", "%s is %.3f ms, %s %.3f ms (x%.4g): the server's reports of one Task disagree",
				claims[0].From, claims[0].MS, c.From, c.MS, c.MS/claims[0].MS)
		}
	}
	return claims[0].MS, nil
}

// TimeParts is the check "timing-parts": a server's timing splits its whole time (total_ms,
// received to completed) into parts that must be non-negative and add up to it, the Task's
// phases must fit in the Task, and the whole must fit in the client's latency. A server that
// reports its whole time as the Task (hiding its overhead) has parts that add up to more than
// the whole.
func TimeParts(t api.Timing, latencyMS float64) error {
	parts := []struct {
		name string
		ms   float64
	}{{"receive_ms", t.ReceiveMS}, {"queue_ms", t.QueueMS}, {"task_call_wall_ms", t.TaskCallWallMS}, {"handover_ms", t.HandoverMS},
		{"encode_wait_ms", t.EncodeWaitMS}, {"encode_ms", t.EncodeMS}, {"other_ms", t.OtherMS}, {"total_ms", t.TotalMS}}
	sum := 0.0
	var terms []string
	for _, p := range parts {
		if p.ms < 0 || math.IsNaN(p.ms) || math.IsInf(p.ms, 0) {
			return fail("timing-parts", "%s is %v", p.name, p.ms)
		}
		if p.name != "total_ms" {
			sum += p.ms
			terms = append(terms, fmt.Sprintf("%s %.3f", p.name, p.ms))
		}
	}
	if d := math.Abs(sum - t.TotalMS); d > taskTolerance(sum, t.TotalMS) {
		return fail("timing-parts", "the parts add up to %.3f ms (%s), the server's total_ms is %.3f", sum, strings.Join(terms, " + "), t.TotalMS)
	}
	phases := 0.0
	for _, ms := range t.TaskPhasesMS {
		if ms < 0 || math.IsNaN(ms) {
			return fail("timing-parts", "task_phases_ms %v: a phase of %v ms", t.TaskPhasesMS, ms)
		}
		phases += ms
	}
	if phases > t.TaskCallWallMS+taskTolerance(phases, t.TaskCallWallMS) {
		return fail("timing-parts", "the Task's phases add up to %.3f ms, more than its task_call_wall_ms %.3f", phases, t.TaskCallWallMS)
	}
	if t.TotalMS > latencyMS {
		return fail("timing-parts", "the server's total_ms %.3f is longer than the client's whole request, %.3f ms", t.TotalMS, latencyMS)
	}
	return nil
}

// OverheadBudget is a request's serving-overhead budget (client latency less the Task) when the
// row states none: 0.88 % of its Task (the project's anchor for a GPU row), plus half
// the client's poll interval for a video (a completion waits that long for the poll that sees
// it, on average).
func OverheadBudget(taskMS, pollMS float64) float64 { return 0.0088*taskMS + pollMS/2 }
