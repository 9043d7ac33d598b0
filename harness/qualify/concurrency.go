package qualify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// ConcurrencyN is how many jobs the concurrency probe has in flight at once: 2, or
// MEDIAQUAL_CONCURRENCY or the server's declared lanes when higher.
func ConcurrencyN(e spec.Entry, cfg Config, lanes int) int {
	return max(2, cfg.Concurrency, lanes)
}

// concurrency is the stage "concurrency": after the measured run, N of the run's inputs at
// once, each driven as a client does (a video's content asked at once, before it can be
// complete; polled to its end and once after; its content fetched twice). Every job must be
// answered within its deadline, none lost, and each output must be the run's output for the
// same input (made one at a time: bytes, or decoded frames where another encoding holds the
// same frames). The throughput at N is reported against the run's; a server that runs one job
// at a time though it does not say it has one lane is a finding, not a failure. Then the
// server's Task times are held to the native Task's (task-native), where a reference row's
// are made one at a time with the native Task beside each (taskPairs), each output held to
// the run's as well.
func (c *caseRun) concurrency(s *serving, a artifactSet, native nativeOutputs) (string, error) {
	if s == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	if len(a.Served) == 0 || a.Served[0].Path == "" {
		return "", errors.New("no served artifacts to compare with: the artifacts stage failed")
	}
	// The probe's inputs are the run's, in its order, each with the run's output for it.
	var items []workItem
	run := map[string]artifact{}
	for _, r := range a.Served {
		if _, ok := run[r.item.key]; !ok {
			run[r.item.key] = r
			items = append(items, r.item)
		}
	}
	n := ConcurrencyN(c.Entry, c.Config, s.lanes)
	// Each waits for the others on a server that runs one at a time.
	ctx, cancel := context.WithTimeout(c.ctx, time.Duration(n)*c.requestDeadline())
	defer cancel()
	outs := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() {
			it, id := items[i%len(items)], fmt.Sprintf("%s-concurrent-%d", casePrefix(c.Entry.ID), i)
			if c.Entry.Workload == spec.TextToVideo {
				outs[i], errs[i] = c.concurrentClip(ctx, s, it, id)
			} else {
				outs[i], errs[i] = c.editWithin(ctx, s, it, id)
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	var failed []error
	for i, err := range errs {
		if err != nil {
			// %v, not %w: a deadline here is this check's finding, not the generic deadline's.
			failed = append(failed, check.Fail("concurrency", "request %d of %d at once (%s): %v", i+1, n, items[i%len(items)].key, err))
		}
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	for i, out := range outs {
		r := run[items[i%len(items)].key]
		if err := c.asRun(r, out, i); err != nil {
			return "", check.Fail("concurrency", "request %d of %d at once (%s) is not the run's output for the same input (request %s): %v", i+1, n, r.item.key, r.RequestID, err)
		}
	}
	// The server's Task times against the native Task's for the same inputs (task-native),
	// where the server's time is the Task call's and not a span around it (its profile says
	// which).
	taskOnly := c.Config.Target.Profile.TaskTimeNote == ""
	pairs, err := c.taskPairs(s, items, run, a, native, n, taskOnly)
	if err != nil {
		return "", err
	}
	nativeNote, err := taskNative(pairs, taskOnly)
	if err != nil {
		return "", err
	}
	perS := float64(n) / wall.Seconds()
	c.T.Attr("concurrent_items_per_s", fmt.Sprintf("%.3f", perS))
	msg := fmt.Sprintf("%d requests at once, each answered and each the run's output for its input; %.3f items/s at %d", n, perS, n)
	if c.Row.Timing == nil || c.Row.Timing.ItemsPerSecond <= 0 {
		msg += " (the run's throughput is unknown: the timing stage established none)"
	} else {
		one := c.Row.Timing.ItemsPerSecond
		speedup := perS / one
		msg += fmt.Sprintf(" against %.3f at %d in the run (%.2fx)", one, c.Config.Concurrency, speedup)
		if speedup < 1.1 && s.lanes != 1 {
			c.findings = append(c.findings, wire.Finding{Name: "serialised", Detail: fmt.Sprintf("%d requests at once gave %.2fx the throughput of the run at concurrency %d, and the server does not say it runs one Task at a time", n, speedup, c.Config.Concurrency)})
		}
	}
	if s.lanes == 1 {
		msg += "; the server declares 1 lane"
	}
	if nativeNote != "" {
		msg += "; " + nativeNote
	}
	return msg, nil
}

// The concurrency probe makes besideMin to besideMax requests with the native Task run beside
// each (taskPairs): past besideMin it stops once they settle task-native (settled).
const (
	besideMin = 3
	besideMax = 6
)

// taskPair is the server's Task time for one request and the native Task's for its input.
type taskPair struct{ claimed, native float64 }

// taskPairs are the server's Task times, each with the native Task's time for the same input.
// For a row whose Task is the suite's own Go code (the reference families), besideMin to
// besideMax more requests, each made one at a time with the native Task run beside it: the two
// share the machine's CPU with each other and with whatever else runs, so a load that slows one
// slows the other (the native Task timed alone, before and after, let a halved report pass
// under load: the server's Task, its encoder beside it, slowed 1.4-2.3x more than the native
// one). Else (a GPU row's Task is not run twice) the run's requests and the probe's against the
// correctness stage's native times. None where the native Task is too short to time against
// (minNativeMS) or there is no native path.
func (c *caseRun) taskPairs(s *serving, items []workItem, run map[string]artifact, a artifactSet, native nativeOutputs, n int, taskOnly bool) ([]taskPair, error) {
	var out []taskPair
	add := func(claimed, nativeMS float64) {
		if claimed > 0 && nativeMS > 0 {
			out = append(out, taskPair{claimed, nativeMS})
		}
	}
	if !c.retimesNative() {
		for _, r := range a.measured() {
			if len(r.taskClaims) > 0 { // the Task-call wall first where there is one (taskClaims)
				add(r.taskClaims[0].MS, native[r.item.key].TaskMS)
			}
		}
		for i := range n {
			it := items[i%len(items)]
			add(c.claim(fmt.Sprintf("%s-concurrent-%d", casePrefix(c.Entry.ID), i)), native[it.key].TaskMS)
		}
		return out, nil
	}
	for i := range besideMax {
		if len(out) >= besideMin && settled(out, taskOnly) {
			break
		}
		it := items[i%len(items)]
		if native[it.key].TaskMS < minNativeMS {
			continue // not timed against: taskNative says why
		}
		id := fmt.Sprintf("%s-beside-%d", casePrefix(c.Entry.ID), i)
		ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
		var nativeMS float64
		var wg sync.WaitGroup
		wg.Go(func() { nativeMS = c.nativeTaskMS(it, native) })
		var served []byte
		var err error
		if c.Entry.Workload == spec.TextToVideo {
			served, err = c.concurrentClip(ctx, s, it, id)
		} else {
			served, err = c.editWithin(ctx, s, it, id)
		}
		wg.Wait()
		cancel()
		if err != nil {
			return nil, check.Fail("concurrency", "request %d of %d with the native Task beside it (%s): %v", i+1, besideMax, it.key, err)
		}
		if err := c.asRun(run[it.key], served, n+i); err != nil {
			return nil, check.Fail("concurrency", "request %d of %d with the native Task beside it (%s) is not the run's output for the same input: %v", i+1, besideMax, it.key, err)
		}
		add(c.claim(id), nativeMS)
	}
	return out, nil
}

// concurrentClip is one video job of the concurrency probe, as a client drives it: created,
// its content asked at once (a 4xx before completion; the history holds the answer), polled to
// its end and once after, and its content fetched twice (the history holds that the bytes repeat).
func (c *caseRun) concurrentClip(ctx context.Context, s *serving, it workItem, id string) ([]byte, error) {
	fields := map[string]string{"model": c.Entry.ID}
	for k, v := range it.fields {
		fields[k] = v
	}
	v, err := s.API.CreateVideo(ctx, fields, id)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.createdJobs(v.ID)
	c.mu.Unlock()
	_, _, _ = s.API.Content(ctx, v.ID)
	done, polls, err := s.API.WaitVideo(ctx, v.ID)
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", v.ID, err)
	}
	if done.Status != "completed" {
		return nil, fmt.Errorf("job %s ended %s after %d polls: %v", v.ID, done.Status, polls.N, done.Error)
	}
	c.claimTask(id, done.Timing.TaskCallWallMS, done.InferenceTimeS)
	if _, err := s.API.GetVideo(ctx, v.ID); err != nil {
		return nil, fmt.Errorf("job %s polled after it completed: %w", v.ID, err)
	}
	// Fetched twice: that the bytes repeat is the model's rule (job-content), held to the
	// history with every other fetch.
	var mp4 [2][]byte
	for i := range mp4 {
		if mp4[i], _, err = s.API.Content(ctx, v.ID); err != nil {
			return nil, fmt.Errorf("job %s's content, fetch %d: %w", v.ID, i+1, err)
		}
	}
	path := filepath.Join(c.Dir, "concurrent", id+extension(c.Entry.Workload))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return mp4[0], os.WriteFile(path, mp4[0], 0o644)
}

// asRun holds a probe output to r, the run's output for the same input (sameOutput).
func (c *caseRun) asRun(r artifact, out []byte, i int) error {
	made, err := os.ReadFile(r.Path)
	if err != nil {
		return err
	}
	return c.sameOutput(made, out, i)
}

// sameOutput holds a probe output to the same input's output made one at a time: the same
// bytes, or the same decoded frames (an encoder that does not repeat its bytes).
func (c *caseRun) sameOutput(ran, out []byte, i int) error {
	if bytes.Equal(ran, out) {
		return nil
	}
	var digests [2][]string
	for k, b := range [][]byte{ran, out} {
		path := filepath.Join(c.Dir, "concurrent", fmt.Sprintf("compare-%d-%d%s", i, k, extension(c.Entry.Workload)))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return err
		}
		var err error
		if digests[k], err = c.frameDigests(path, nil); err != nil {
			return fmt.Errorf("other bytes, and they do not decode: %w", err)
		}
	}
	return check.FrameIdentity(digests[1], digests[0])
}

// claimTask keeps the server's Task time for one of the suite's own requests: the Task-call
// wall where it reports one, else inference_time_s.
func (c *caseRun) claimTask(requestID string, taskMS, inferenceS float64) {
	if taskMS <= 0 {
		taskMS = inferenceS * 1000
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims == nil {
		c.claims = map[string]float64{}
	}
	c.claims[requestID] = taskMS
}

// claim is the server's Task time for one of the suite's own requests, 0 when it gave none.
func (c *caseRun) claim(requestID string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.claims[requestID]
}

// retimesNative says whether the native Task can be run again here: a Task that is the suite's
// own Go code (the reference families), not a GPU row's.
func (c *caseRun) retimesNative() bool { return c.Entry.NewTask != nil && c.Entry.Bundle == "" }

// nativeTaskMS is the native Task's wall time for it, timed here and now (taskPairs); the
// correctness stage's time where the Task cannot be made again. 0 when there is none.
func (c *caseRun) nativeTaskMS(it workItem, native nativeOutputs) float64 {
	n, ok := native[it.key]
	if !ok {
		return 0
	}
	if !c.retimesNative() {
		return n.TaskMS
	}
	task, err := c.Entry.NewTask()
	if err != nil {
		return n.TaskMS
	}
	req := spec.Request{Settings: it.st}
	if it.ref != nil {
		img, err := media.DecodeImageBytes(it.ref)
		if err != nil {
			return n.TaskMS
		}
		req.Reference, req.ReferenceFile = img, it.ref
	}
	start := time.Now()
	if _, err := task.Run(c.ctx, req); err != nil {
		return n.TaskMS
	}
	return ms(time.Since(start))
}
