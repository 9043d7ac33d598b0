package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// lane serves one model from a bounded queue: each of its Tasks (one per lane index, on devices
// of its own) takes the next job when it is free, one at a time. Each has an encoder beside it:
// once a Task's output is checked, it takes the next job while the clip encodes, so the model
// never waits for ffmpeg; encodes[i] holds one clip waiting while another encodes, which
// bounds the frames held in memory.
type lane struct {
	model   Model
	queue   chan *job
	tasks   []spec.Task
	encodes []chan encodeJob

	mu  sync.Mutex
	avg time.Duration // moving average of job time, for Retry-After
}

// job is one accepted generation request. Fields below the mutex note are guarded by
// Server.mu.
type job struct {
	id            string
	kind          spec.Capability
	lane          *lane
	req           spec.Request
	decode        bool         // an in-process edit: the lane decodes req.ReferenceFile first
	mem           *reservation // its share of the memory budget: upload, decode; nil for none
	requestID     string
	correlationID string
	route         string
	base          string // scheme://host the client used, for absolute URLs
	inputs        map[string]string
	path          string
	inline        bool // an edit answered in its response (b64_json): no artifact file
	ctx           context.Context
	cancel        context.CancelCauseFunc
	done          chan struct{}

	// guarded by Server.mu
	changed   chan struct{} // closed (and replaced) when status or progress changes: held polls answer
	status    string        // queued | in_progress | completed | failed
	progress  int
	received  time.Time // the request's handler began
	bodyRead  time.Time // its body was in
	created   time.Time
	started   time.Time
	laneIdx   int       // the index of the lane (the Task) that ran it
	generated time.Time // the Task's output was checked and handed to the encoder
	encoding  time.Time // the encoder took it
	completed time.Time
	expires   time.Time
	err       *JobError
	product   *Product
	deleted   bool
	stored    int64 // bytes of its artifact on disk, counted in Server.artifactBytes
}

var (
	errDeleted   = errors.New("deleted by request")
	jobIDPattern = regexp.MustCompile(`^(video|img)_[0-9a-f]{32}$`)
)

func randomHex() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) newJob(prefix, ext string, kind spec.Capability, l *lane, req spec.Request, r requestInfo) *job {
	id := prefix + randomHex()
	ctx, cancel := context.WithCancelCause(context.Background())
	return &job{
		id: id, kind: kind, lane: l, req: req, requestID: r.requestID, correlationID: r.correlationID,
		route: r.route, base: r.base, inputs: r.inputs,
		path: filepath.Join(s.cfg.ArtifactDir, id+ext), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), changed: make(chan struct{}), status: "queued", received: r.received, bodyRead: r.bodyRead, created: time.Now(),
	}
}

// enqueue admits j to its lane or refuses it: a full queue answers 429 with Retry-After, and a
// refused job is never half-admitted.
func (s *Server) enqueue(j *job) (*apiError, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errf(503, "server_shutting_down", "", "server is shutting down"), 0
	}
	if e := s.full(); e != nil {
		return e, s.cfg.JanitorEvery
	}
	if s.fault.lose(s, j) {
		s.jobs[j.id] = j
		s.wg.Add(1)
		go func() { // ended only when cancelled, as a lane ends a job cancelled while queued
			defer s.wg.Done()
			<-j.ctx.Done()
			s.finish(j, Product{}, context.Cause(j.ctx))
			close(j.done)
		}()
		return nil, 0
	}
	select {
	case j.lane.queue <- j:
		s.jobs[j.id] = j
		return nil, 0
	default:
		l := j.lane
		l.mu.Lock()
		wait := l.avg * time.Duration(len(l.queue)+1) / time.Duration(len(l.tasks))
		l.mu.Unlock()
		return errf(429, "server_busy", "", "the queue for %s is full (%d jobs waiting); retry later", l.model.Checkpoint.ID, cap(l.queue)), wait
	}
}

func (s *Server) runLane(l *lane, i int) {
	defer s.wg.Done()
	defer close(l.encodes[i])
	for j := range l.queue {
		s.execute(l, i, j)
	}
}

// encodeJob is a checked Task output on its way to the lane's encoder.
type encodeJob struct {
	j      *job
	g      generated
	ctx    context.Context // the job's, with its deadline
	cancel context.CancelFunc
}

func (s *Server) runEncoder(l *lane, i int) {
	defer s.wg.Done()
	for e := range l.encodes[i] {
		s.mu.Lock()
		e.j.encoding = time.Now()
		s.mu.Unlock()
		path := e.j.path
		if e.j.inline {
			path = ""
		}
		p, err := e.g.encode(e.ctx, path, s.fault)
		if err != nil && e.ctx.Err() != nil {
			err = context.Cause(e.ctx)
		}
		e.cancel()
		s.finish(e.j, p, err)
		close(e.j.done)
	}
}

func (s *Server) execute(l *lane, i int, j *job) {
	var ref image.Image
	var err error
	if j.decode && j.ctx.Err() == nil { // charged to the budget since admission
		ref, err = decodeReference(j.req.ReferenceFile)
	}
	s.mu.Lock()
	if j.ctx.Err() != nil { // deleted or shut down while queued
		err = context.Cause(j.ctx)
	}
	if err != nil {
		s.mu.Unlock()
		s.finish(j, Product{}, err)
		close(j.done)
		return
	}
	j.status, j.started, j.laneIdx = "in_progress", time.Now(), i
	j.touch()
	s.mu.Unlock()

	req := j.req
	req.Reference = ref // an in-process edit's decoded reference; nil otherwise
	req.Progress = func(done, total int) {
		if total <= 0 {
			return
		}
		s.mu.Lock()
		if p := min(99, done*100/total); p != j.progress { // 100 only once the artifact exists
			j.progress = p
			j.touch()
		}
		s.mu.Unlock()
	}
	limit := s.jobDeadline(l.model.Checkpoint, req.Settings)
	ctx, cancel := context.WithTimeoutCause(j.ctx, limit, &spec.Error{Code: "job_timeout", Message: fmt.Sprintf(
		"the Task did not answer within %s (-job-timeout %s at the row's pinned settings, scaled by this job's steps, frames and pixels)", limit, s.cfg.JobTimeout)})
	g, err := generate(ctx, l.tasks[i], l.model.Checkpoint, j.kind, req, s.fault, j.path)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel()
		s.finish(j, Product{}, err)
		close(j.done)
		return
	}
	s.mu.Lock()
	j.generated = time.Now()
	s.mu.Unlock()
	l.encodes[i] <- encodeJob{j, g, ctx, cancel} // the clip's encoder runs under the deadline too
}

// jobDeadline is how long a job's Task may take: Config.JobTimeout for the row's pinned
// settings, scaled up by how much more work (steps x frames x pixels) the job asks for.
func (s *Server) jobDeadline(cp spec.Checkpoint, st spec.Settings) time.Duration {
	work := func(st spec.Settings) float64 {
		return float64(max(1, st.Steps)) * float64(max(1, st.NumFrames)) * float64(max(1, st.Size.W*st.Size.H))
	}
	return time.Duration(float64(s.cfg.JobTimeout) * max(1, work(st)/work(cp.Defaults)))
}

// finish moves j to its terminal state and writes its one terminal ledger line.
func (s *Server) finish(j *job, p Product, err error) {
	s.mu.Lock()
	now := time.Now()
	j.completed, j.expires = now, now.Add(s.cfg.Lifetime)
	status := "completed"
	switch {
	case j.deleted:
		status = "cancelled"
		s.removeFiles(j)
	case err != nil:
		status = "failed"
		j.err = jobError(err)
		os.Remove(j.path)
	default:
		s.fault.product(&p, j.kind)
		j.product, j.progress = &p, 100
		if s.fault.is("artifact-missing") {
			os.Remove(j.path)
			j.product.Inline = nil
		}
	}
	if status != "cancelled" {
		j.status = status
	}
	j.touch()
	// A url-format edit stays in the store for its lifetime; its upload (up to MaxBodyBytes)
	// is no longer needed once the Task has run. The decoded reference was never kept here.
	j.req.ReferenceFile = nil
	j.mem.release()
	if j.product != nil && j.product.Path != "" && !j.deleted {
		j.stored = j.product.Bytes
		s.artifactBytes += j.stored
	}
	e := LedgerEntry{
		Event: "job", RequestID: j.requestID, CorrelationID: j.correlationID, Route: j.route,
		Model: j.lane.model.Checkpoint.ID, JobID: j.id, Status: status, Error: j.err,
		Settings: &j.req.Settings, Inputs: j.inputs, Timing: j.timing(),
	}
	if !j.started.IsZero() {
		e.Lane = &j.laneIdx
		if d := j.lane.model.Devices; j.laneIdx < len(d) {
			e.LaneDevices = d[j.laneIdx]
		}
		e.Layout = j.lane.model.Checkpoint.Layout
	}
	if j.deleted {
		e.Error = &JobError{Code: "cancelled", Message: "deleted before it finished"}
	}
	if j.product != nil {
		e.Output = &LedgerOutput{SHA256: p.SHA256, Bytes: p.Bytes, FramesSHA256: p.FramesSHA256, PeakMemoryMB: p.PeakMemoryMB}
		e.Actual = &p.Actual
	}
	s.fault.ledgerLine(&e)
	s.mu.Unlock()

	if status == "completed" {
		l := j.lane
		l.mu.Lock()
		took := now.Sub(j.started)
		if l.avg == 0 {
			l.avg = took
		} else {
			l.avg = (l.avg*7 + took) / 8
		}
		l.mu.Unlock()
	}
	s.ledger.write(e, true)
}

// touch wakes the polls held on j (Config.PollHold): what they would answer has changed.
// Called with Server.mu held.
func (j *job) touch() {
	close(j.changed)
	j.changed = make(chan struct{})
}

func jobError(err error) *JobError {
	var se *spec.Error
	switch {
	case errors.As(err, &se):
		return &JobError{Code: se.Code, Message: se.Message, badInput: se.BadInput, param: se.Param}
	case errors.Is(err, errShutdown):
		return &JobError{Code: "server_shutdown", Message: "the server shut down before the job finished"}
	}
	return &JobError{Code: "task_failed", Message: err.Error()}
}

// timing must be called with s.mu held.
func (j *job) timing() *Timing {
	if j.started.IsZero() {
		return &Timing{}
	}
	t := &Timing{ReceiveMS: ms(j.created.Sub(j.received)), ReceiveBodyMS: ms(j.bodyRead.Sub(j.received)), QueueMS: ms(j.started.Sub(j.created))}
	if !j.completed.IsZero() {
		t.TotalMS = ms(j.completed.Sub(j.received))
	}
	if !j.encoding.IsZero() {
		t.EncodeWaitMS = ms(j.encoding.Sub(j.generated))
	}
	if p := j.product; p != nil {
		t.TaskCallWallMS, t.EncodeMS, t.HandoverMS = ms(p.TaskWall), ms(p.Encode), ms(p.Handover)
		t.TaskPhasesMS, t.StreamedFrames = p.Phases, p.StreamedFrames
		// The rest is the server's own work around them: checks, file digest, bookkeeping.
		t.OtherMS = math.Round(max(0, t.TotalMS-t.ReceiveMS-t.QueueMS-t.TaskCallWallMS-t.HandoverMS-t.EncodeWaitMS-t.EncodeMS)*1000) / 1000
	}
	return t
}

// removeFiles deletes j's artifact (and any partial file) and reports what it removed. Call
// with s.mu held.
func (s *Server) removeFiles(j *job) []string {
	s.artifactBytes -= j.stored
	j.stored = 0
	var removed []string
	for _, p := range []string{j.path, filepath.Join(filepath.Dir(j.path), "."+filepath.Base(j.path)+".tmp")} {
		if err := os.Remove(p); err == nil {
			removed = append(removed, filepath.Base(p))
		}
	}
	return removed
}

// forget removes j from the store for good (delete or expiry). Call with s.mu held.
func (s *Server) forget(j *job, why string) []string {
	delete(s.jobs, j.id)
	const maxGone = 10000
	if len(s.gone) >= maxGone {
		clear(s.gone) // tombstones only improve 404 messages; dropping them loses no job
	}
	s.gone[j.id] = why
	s.fault.forgotten(j)
	j.deleted = true
	j.touch()
	j.cancel(errDeleted)
	if why == "deleted" && s.fault.keepContent(j.id, j.path) {
		return nil
	}
	return s.removeFiles(j)
}

// lookup finds a live job of the given kind; the 404 names why a known id is gone.
func (s *Server) lookup(id string, kind spec.Capability) (*job, *apiError) {
	noun, code := "video", "video_not_found"
	if kind == spec.ImageEdit {
		noun, code = "image", "image_not_found"
	}
	if !jobIDPattern.MatchString(id) {
		return nil, errf(404, code, "id", "no %s with id %q", noun, id)
	}
	if j, ok := s.jobs[id]; ok && j.kind == kind {
		return j, nil
	}
	if why, ok := s.gone[id]; ok {
		return nil, errf(404, code, "id", "%s %s was %s", noun, id, why)
	}
	return nil, errf(404, code, "id", "no %s with id %q", noun, id)
}

func (s *Server) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.JanitorEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.expire(now)
		}
	}
}

func (s *Server) expire(now time.Time) {
	var entries []LedgerEntry
	s.mu.Lock()
	for _, j := range s.jobs {
		if j.completed.IsZero() || now.Before(j.expires) {
			continue
		}
		removed := s.forget(j, "expired at "+j.expires.UTC().Format(time.RFC3339))
		entries = append(entries, LedgerEntry{
			Event: "expire", RequestID: j.requestID, Route: j.route, Model: j.lane.model.Checkpoint.ID,
			JobID: j.id, Status: "expired", FilesRemoved: removed,
		})
	}
	s.mu.Unlock()
	for _, e := range entries {
		s.ledger.write(e, true)
	}
}

func retryAfterSeconds(d time.Duration) int {
	return int(min(3600, max(1, math.Ceil(d.Seconds()))))
}
