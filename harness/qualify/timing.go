package qualify

import (
	"cmp"
	"errors"
	"fmt"
	"image"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// timing is the stage "timing": AIPerf's client end-to-end latency against the server's Task
// time, per request joined on X-Request-ID, over measured requests only (warmup, load and
// start-up are outside). A launched mediaserve must report its Task-call wall; an endpoint
// that reports no Task time is timed by the client alone, and the row says so. Where the
// native path ran the same inputs here, the server's Task time is held to the native Task's
// both ways (task-native); without one it is the server's word, "as reported", a limit.
func (c *caseRun) timing(a artifactSet, native nativeOutputs) (string, error) {
	var lat, task, over []float64
	var first, last int64
	frames := 0
	tm := &reports.Timing{Source: "AIPerf " + aiperf.Version + " request_latency", PollIntervalMS: a.Run.PollMS}
	if a.Run.PollMS > 0 {
		tm.PollHoldMS = float64(c.pollHold.Milliseconds())
	}
	// Every request's reports of its Task, warmup too: a figure the client's clock refutes
	// fails by name wherever it is (the latency chart would refuse a negative one unnamed).
	for _, s := range a.Served {
		within := math.Inf(1)
		if s.hasLatency {
			within = s.LatencyMS
		}
		if err := check.TaskBounds(s.taskClaims, within); err != nil {
			return "", fmt.Errorf("request %s (job %s): %w", s.RequestID, s.JobID, err)
		}
	}
	measured := a.measured()
	untimed, uncrossed := 0, 0
	var claimed []string // where a Task time nothing could cross-check came from
	for i, s := range measured {
		if !s.hasLatency {
			// A missing latency read as 0 ms would make the overhead negative and the budget
			// unfailable.
			return "", check.Fail("timing-latency", "request %s (job %s): AIPerf recorded no request_latency for it, so its client time is unknown", s.RequestID, s.JobID)
		}
		where := fmt.Sprintf("request %s (job %s)", s.RequestID, s.JobID)
		if !c.Config.Target.External() && (s.timing == nil || s.timing.TaskCallWallMS == 0) {
			// A launched mediaserve's contract: its ledger times every Task.
			return "", check.Fail("task-wall", "%s: the server reported no Task-call wall", where)
		}
		if s.timing != nil && s.timing.TotalMS > 0 {
			if err := check.TimeParts(*s.timing, s.LatencyMS); err != nil {
				return "", fmt.Errorf("%s: %w", where, err)
			}
			if c.Entry.Workload == spec.TextToVideo && s.timing.EncodeMS == 0 && c.suiteEncodeMS > 0 {
				return "", check.Fail("timing-parts", "%s: the server says its encode took no time (encode_ms 0, of total_ms %.1f), but encoding the same frames with the contract's encoder took the suite %.1f ms: a part hidden in another",
					where, s.timing.TotalMS, c.suiteEncodeMS)
			}
		} else if len(s.taskClaims) == 1 {
			uncrossed++
			if !slices.Contains(claimed, s.taskClaims[0].From) {
				claimed = append(claimed, s.taskClaims[0].From)
			}
		}
		// After the parts: a Task set to the server's whole time disagrees with its other
		// report too, but its parts say what it hid.
		taskMS, err := check.TaskAgrees(s.taskClaims)
		if err != nil {
			return "", fmt.Errorf("%s: %w", where, err)
		}
		if taskMS <= 0 {
			untimed++
		}
		measured[i].TaskMS = taskMS
		lat = append(lat, s.LatencyMS)
		task = append(task, taskMS)
		over = append(over, s.LatencyMS-taskMS)
		tm.PeakMemoryMB = max(tm.PeakMemoryMB, s.peakMB)
		end := s.creditNS + int64(s.LatencyMS*1e6)
		if first == 0 || s.creditNS < first {
			first = s.creditNS
		}
		last = max(last, end)
		frames += c.Entry.Defaults.NumFrames
	}
	if len(lat) == 0 {
		return "", errors.New("no measured requests: the aiperf stage failed")
	}
	timed := untimed == 0
	nativeNote, whyNot := "", "no native path here times the same Task"
	var ran []float64
	for _, s := range measured {
		if n, ok := native[s.item.key]; ok && n.TaskMS > 0 {
			ran = append(ran, n.TaskMS)
		}
	}
	switch {
	case len(ran) > 0 && slices.Min(ran) >= minNativeMS:
		nativeNote = "the Task time held to the native Task's in the concurrency stage (task-native)"
	case len(ran) > 0:
		whyNot = fmt.Sprintf("the native Task (%.1f ms at its fastest) is too short to time the server's against (under %g ms)", slices.Min(ran), minNativeMS)
	}
	if timed {
		for i, s := range measured {
			if b := c.overheadBudget(s.TaskMS, a.Run.PollMS); over[i] > b {
				return "", check.Fail("timing-overhead", "request %s took %.0f ms end to end for a %.0f ms Task: %.0f ms of serving overhead, budget %.0f ms",
					s.RequestID, s.LatencyMS, s.TaskMS, over[i], b)
			}
		}
	}
	window := time.Duration(last - first).Seconds()
	tm.Requests = len(lat)
	tm.ClientP50MS, tm.ClientP95MS, tm.ClientMaxMS = pct(lat, 50), pct(lat, 95), pct(lat, 100)
	if timed {
		tm.TaskP50MS, tm.TaskP95MS = pct(task, 50), pct(task, 95)
		tm.OverheadP50MS = pct(over, 50)
		tm.Parts = timeParts(measured)
	}
	tm.Concurrency = c.Config.Concurrency
	taskSpeed(tm, c.Entry, measured)
	encodeQuality(tm, measured)
	tm.ItemsPerSecond = float64(len(lat)) / window // from the first send to the last completion
	if c.Entry.Workload == spec.TextToVideo {
		tm.FramesPerSecond = float64(frames) / window
	}
	c.Row.Timing = tm
	var points []reports.LatencyPoint
	for i, s := range a.Served {
		points = append(points, reports.LatencyPoint{Index: i, ClientMS: s.LatencyMS, TaskMS: s.TaskMS, Warmup: s.Warmup})
	}
	if chart, err := reports.LatencyChart(points); err != nil {
		return "", err
	} else if err := c.picture(reports.LatencyKind, fmt.Sprintf("Latency per request: %s (%d warmup, %d measured)", c.Entry.ID, len(a.Served)-len(lat), len(lat)), "latency.png", chart); err != nil {
		return "", err
	}
	c.T.Attr("client_p50_ms", fmt.Sprintf("%.1f", tm.ClientP50MS))
	if !timed {
		c.limit(spec.FamilyValidated, "the endpoint reports no Task time: serving overhead is not measured")
		c.T.Attr("items_per_s", fmt.Sprintf("%.3f", tm.ItemsPerSecond))
		return fmt.Sprintf("client p50 %.1f ms over %d measured requests; Task time not reported by the endpoint for %d of them: overhead not measured",
			tm.ClientP50MS, tm.Requests, untimed), nil
	}
	if uncrossed > 0 {
		c.limit(spec.FamilyValidated, fmt.Sprintf("the Task time of %d of %d measured requests is the server's claim alone (%s): no second report of it and no parts adding up to a total to hold it to, so the overhead rests on the server's word",
			uncrossed, len(measured), strings.Join(claimed, ", ")))
	}
	if nativeNote == "" {
		c.limit(spec.FamilyValidated, "the Task time is as reported by the server: "+whyNot+", so the overhead (client time less Task time) rests on the server's word")
	}
	c.T.Attr("task_p50_ms", fmt.Sprintf("%.1f", tm.TaskP50MS))
	c.T.Attr("overhead_p50_ms", fmt.Sprintf("%.1f", tm.OverheadP50MS))
	c.T.Attr("items_per_s", fmt.Sprintf("%.3f", tm.ItemsPerSecond))
	asReported := ""
	if nativeNote == "" {
		asReported = " (as reported)"
	} else {
		nativeNote = "; " + nativeNote
	}
	msg := fmt.Sprintf("client p50 %.1f ms, Task p50 %.1f ms%s, overhead p50 %.1f ms%s over %d measured requests, each within its overhead budget (%s)%s",
		tm.ClientP50MS, tm.TaskP50MS, asReported, tm.OverheadP50MS, asReported, tm.Requests, c.budgetText(a.Run.PollMS, tm.TaskP50MS), nativeNote)
	if uncrossed > 0 {
		return msg + fmt.Sprintf("; the Task time of %d is the server's claim alone", uncrossed), nil
	}
	return msg + "; every Task time cross-checked (the server's reports of it agree, its parts add up to its total, within the client's time)", nil
}

// overheadBudget is a measured request's serving-overhead budget: the row's own
// (MaxOverheadMS, the reference families'), else check.OverheadBudget of its Task.
func (c *caseRun) overheadBudget(taskMS, pollMS float64) float64 {
	if b := c.Entry.MaxOverheadMS; b > 0 {
		return b
	}
	return check.OverheadBudget(taskMS, pollMS)
}

// budgetText says what overheadBudget is for this row; a row's own allowance beside what the
// 0.88 % rule would allow its Task (taskMS, the p50).
func (c *caseRun) budgetText(pollMS, taskMS float64) string {
	if b := c.Entry.MaxOverheadMS; b > 0 {
		return fmt.Sprintf("the row's own %.0f ms a request, where the 0.88 %% rule would allow %.1f ms", b, check.OverheadBudget(taskMS, pollMS))
	}
	if pollMS > 0 {
		return fmt.Sprintf("0.88 %% of the Task plus %.0f ms, half the poll interval", pollMS/2)
	}
	return "0.88 % of the Task"
}

// taskSpeed sets the denoise figures for a row with a FLOP count whose Task reports its
// denoise phase: ms a step (p50) and the TFLOP/s that achieves.
func taskSpeed(tm *reports.Timing, e spec.Entry, measured []artifact) {
	if e.DenoiseFLOPs == nil || e.Defaults.Steps <= 0 {
		return
	}
	var perStep []float64
	for _, s := range measured {
		if s.timing == nil {
			continue
		}
		if d, ok := s.timing.TaskPhasesMS["denoise"]; ok {
			perStep = append(perStep, d/float64(e.Defaults.Steps))
		}
	}
	if len(perStep) == 0 {
		return
	}
	tm.DenoiseTFLOPPerStep = e.DenoiseFLOPs(e.Defaults) / 1e12
	tm.DenoiseMSPerStep = pct(perStep, 50)
	tm.AchievedTFLOPS = tm.DenoiseTFLOPPerStep / (tm.DenoiseMSPerStep / 1000)
}

// encodeQuality sets the worst and mean encode PSNR of the artifacts where it was measured.
func encodeQuality(tm *reports.Timing, measured []artifact) {
	var psnrs []float64
	for _, s := range measured {
		if s.PSNR > 0 {
			psnrs = append(psnrs, s.PSNR)
		}
	}
	if len(psnrs) == 0 {
		return
	}
	tm.EncodePSNRMinDB = slices.Min(psnrs)
	for _, p := range psnrs {
		tm.EncodePSNRMeanDB += p / float64(len(psnrs))
	}
}

// timeParts is the p50 of each part of the measured requests' time, in the ledger's order,
// then the client's share: its latency beyond the server's total (polling, HTTP, transfer).
// A Task that reports phases is shown by phase, else as one part. A server that reports only
// its Task time has no parts.
func timeParts(reqs []artifact) []reports.TimePart {
	for _, s := range reqs {
		if s.timing == nil || s.timing.TotalMS == 0 {
			return nil
		}
	}
	if len(reqs) == 0 {
		return nil
	}
	var names []string
	for name := range reqs[0].timing.TaskPhasesMS {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(phaseOrder(a), phaseOrder(b)) })
	part := func(name string, of func(s artifact) float64) reports.TimePart {
		xs := make([]float64, len(reqs))
		for i, s := range reqs {
			xs[i] = of(s)
		}
		return reports.TimePart{Name: name, MS: pct(xs, 50)}
	}
	parts := []reports.TimePart{
		part("receive", func(s artifact) float64 { return s.timing.ReceiveMS }),
		part("queue", func(s artifact) float64 { return s.timing.QueueMS }),
	}
	if len(names) == 0 {
		parts = append(parts, part("task", func(s artifact) float64 { return s.timing.TaskCallWallMS }))
	}
	for _, n := range names {
		parts = append(parts, part("task: "+n, func(s artifact) float64 { return s.timing.TaskPhasesMS[n] }))
	}
	return append(parts,
		part("hand-over", func(s artifact) float64 { return s.timing.HandoverMS }),
		part("encode wait", func(s artifact) float64 { return s.timing.EncodeWaitMS }),
		part("encode", func(s artifact) float64 { return s.timing.EncodeMS }),
		part("server other", func(s artifact) float64 { return s.timing.OtherMS }),
		part("client", func(s artifact) float64 { return s.LatencyMS - s.timing.TotalMS }))
}

// phaseOrder puts known Task phases in the order they run; others follow by name.
func phaseOrder(name string) int {
	if i := slices.Index([]string{"encode_prompt", "encode_image", "denoise", "decode"}, name); i >= 0 {
		return i
	}
	return 100
}

// picture writes img under the case's pictures/ and lists it with the row, its path relative
// to the report directory (pictures are only kept when a report is written).
func (c *caseRun) picture(kind, title, name string, img image.Image) error {
	root := c.Config.ReportDir
	if root == "" {
		return nil
	}
	path := filepath.Join(c.Dir, "pictures", name)
	if err := reports.WritePNG(path, img); err != nil {
		return err
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	// Source: a report written elsewhere than ReportDir (reports.WriteFiles) copies it along.
	c.Row.Pictures = append(c.Row.Pictures, reports.Picture{Kind: kind, Title: title, Path: filepath.ToSlash(rel), Source: abs})
	return nil
}

// showArtifact draws the first measured artifact for people to look at: a contact sheet of a
// clip, or an edit's before/after/difference strip.
func (c *caseRun) showArtifact(served []artifact) error {
	if len(served) == 0 || c.Config.ReportDir == "" {
		return nil
	}
	s := served[0]
	prompt := s.item.fields["prompt"]
	if c.Entry.Workload == spec.TextToVideo {
		frames, err := c.decodeClip(s.Path)
		if err != nil {
			return err
		}
		sheet, err := reports.ContactSheet(frames, 5)
		if err != nil {
			return err
		}
		return c.picture(reports.ContactSheetKind, fmt.Sprintf("Contact sheet: %s, %s %q (%d frames)", c.Entry.ID, s.item.key, prompt, len(frames)), "contact-"+s.item.key+".png", sheet)
	}
	before, err := media.DecodeImageBytes(s.item.ref)
	if err != nil {
		return err
	}
	after, err := media.DecodeImage(s.Path)
	if err != nil {
		return err
	}
	strip, err := reports.EditStrip(before, after)
	if err != nil {
		return err
	}
	return c.picture(reports.EditStripKind, fmt.Sprintf("Before / after: %s, %s %q", c.Entry.ID, s.item.key, prompt), "edit-"+s.item.key+".png", strip)
}

// pct is the nearest-rank percentile p of xs.
func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// task-native's bounds on the server's Task time against the native Task's for the same
// inputs, the two timed side by side (taskPairs) and each summed over the pairs: on a shared
// CPU one pair is often uneven (which of the two had a core to itself), their sum much less.
// The server's may be up to 2x the native (a span around the Task call); it cannot be much
// shorter: at least 1/1.4 of it. Measured on 2 cores, six pairs a run: an honest ref-t2v
// server 0.84-1.29x idle and 0.85-1.06x beside two busy loops and another run; a halved report
// 0.41-0.57x and 0.42-0.52x; after three pairs, honest 0.80-1.01x and halved 0.41-0.50x (under
// load). So pairs stop once the sum is settleMargin away from both bounds, and go on to
// besideMax where it is not. A Task shorter than minNativeMS is not timed against: there a
// timer's and a scheduler's noise is the size of the Task (an honest 15.0 ms served against
// 20.4 native).
const (
	nativeFaster = 0.4
	nativeSlower = 1.0
	minNativeMS  = 40.0
	settleMargin = 1.2
)

// nativeBounds are task-native's bounds on the ratio of the server's Task times to the native
// ones: no upper one where the server's time may span more than the Task (taskOnly false).
func nativeBounds(taskOnly bool) (lo, hi float64) {
	if !taskOnly {
		return 1 / (1 + nativeFaster), math.Inf(1)
	}
	return 1 / (1 + nativeFaster), 1 + nativeSlower
}

// pairRatio is the server's Task times over the native Task's, each summed.
func pairRatio(pairs []taskPair) float64 {
	var claimed, ran float64
	for _, p := range pairs {
		claimed, ran = claimed+p.claimed, ran+p.native
	}
	return claimed / ran
}

// settled says whether pairs decide task-native already: their ratio is at least settleMargin
// away from each bound, on either side.
func settled(pairs []taskPair, taskOnly bool) bool {
	r := pairRatio(pairs)
	lo, hi := nativeBounds(taskOnly)
	near := func(b float64) bool { return r > b/settleMargin && r < b*settleMargin }
	return !near(lo) && !near(hi)
}

// taskNative is the check "task-native": the server's Task times for the suite's own requests
// against the native Task's wall times for the same inputs, the one source of a Task's length
// that is not the server's word. A Task reported at half its length is refused even when the
// server's own figures agree with each other, and one past twice the native's too (a Task
// stretched over a ref-t2v job's encode is not: 1.4-1.9x; timing-parts refuses that one). A server whose time is a span around the Task (taskOnly false: its profile says
// so, as SGLang's and vLLM-Omni's inference_time_s) is held to the lower bound alone: its time
// may be longer than the Task, never shorter. Returns what it established, "" when there was
// nothing to hold the server to.
func taskNative(pairs []taskPair, taskOnly bool) (string, error) {
	if len(pairs) == 0 || slices.MinFunc(pairs, func(a, b taskPair) int { return cmp.Compare(a.native, b.native) }).native < minNativeMS {
		return "", nil
	}
	var each []string
	for _, p := range pairs {
		each = append(each, fmt.Sprintf("%.1f/%.1f", p.claimed, p.native))
	}
	ratio := pairRatio(pairs)
	lo, hi := nativeBounds(taskOnly)
	within := fmt.Sprintf("%.2f..%.2f", lo, hi)
	if !taskOnly {
		within = fmt.Sprintf("at least %.2f: the server's time spans more than the Task", lo)
	}
	if ratio < lo || ratio > hi {
		return "", check.Fail("task-native", "the server's Task time is %.2fx the native Task's for the same inputs (%d requests, server/native ms: %s): outside %s, the server misreports its Task",
			ratio, len(pairs), strings.Join(each, ", "), within)
	}
	return fmt.Sprintf("the server's Task time %.2fx the native Task's for the same inputs (%d requests, server/native ms: %s; within %s)", ratio, len(pairs), strings.Join(each, ", "), within), nil
}
