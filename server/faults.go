package server

import (
	"context"
	"fmt"
	"image"
	"image/draw"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// Faults are deliberately broken behaviours, each switched on with `mediaserve -fault NAME`,
// that exist to prove the qualification suite catches what it claims to (docs/FAULTS.md). Off
// by default; when on, /v1/models names the fault on every model.
var Faults = map[string]string{
	"ignore-reference":    "edits run on a flat grey image instead of the uploaded reference",
	"prompt-ignored":      "every job runs one fixed prompt instead of the one asked",
	"seed-ignored":        "every job runs seed 0 and says it ran the seed asked (a Task with a fixed generator)",
	"edit-unchanged":      "edits return the reference itself, resized",
	"wrong-frame-count":   "the MP4 loses its last frame after the frame check",
	"wrong-fps":           "the MP4 is written at twice the asked fps",
	"wrong-size":          "frames are cropped 16 pixels narrower before encoding",
	"swaps-channels":      "frames are encoded with red and blue swapped (the Task's frames, and their digest, are right)",
	"nondeterministic":    "a few pixels of every output get random values",
	"corrupt-mp4":         "the MP4 is truncated to half its length after encoding",
	"job-fails":           "every job fails",
	"job-hangs":           "every job hangs until it is cancelled",
	"poll-500":            "the first poll of every unfinished job answers 500",
	"artifact-missing":    "the artifact (its file, or an inline edit's image) is lost when its job completes",
	"delete-leaves-files": "DELETE answers deleted but leaves the artifact on disk",
	"latency-spike":       "the third job of a size waits 3 s before its Task runs",
	"delete-keeps-job":    "DELETE answers deleted but the job stays",
	"content-undeleted":   "DELETE forgets the job, but its content keeps downloading (served from a copy the delete does not reach)",
	"downscaled":          "frames are encoded at half their detail: each 2x2 box's mean written over the box (the size asked, a clip half the size)",
	"limited-range":       "frames are encoded with their levels squeezed into 16..235 (a full-range picture written as limited range)",
	"inference-ms":        "inference_time_s reports the Task in milliseconds where seconds are meant (timing untouched)",
	"inference-halved":    "inference_time_s reports half the Task's time (timing untouched)",
	"task-is-total":       "the ledger records the server's whole time (total_ms) as the Task-call wall, hiding its overhead",
	"ledger-wrong-digest": "the ledger records a digest that is not the artifact's",
	"no-task-wall":        "the ledger records no Task-call wall",
	"task-overstated":     "the ledger records every Task-call wall 10 s longer than it was (a server hiding its overhead)",
	"refetch-fails":       "an artifact can be downloaded once; later downloads answer 500",
	"load-fails":          "loading the models fails, so the server exits before it is ready",
	"exit-nonzero":        "the server exits with status 1 after a clean shutdown",
	"clamps-steps":        "a num_inference_steps above the model's range runs at its maximum instead of being refused",
	"actual-differs":      "the Task runs half the asked num_inference_steps and the server says so in actual (its own actual guard bypassed)",
	"actual-unasked":      "edits report a num_frames and fps in actual, settings an edit is never asked",
	"poll-other-job":      "once a job has completed, its polls are answered with the object of the newest other job (a cache keyed by the wrong id)",
	"status-regresses":    "the second poll of a completed job answers in_progress (a status read from a stale replica)",
	"completed-at-ms":     "completed_at is written in milliseconds where the contract has seconds",
	"content-early":       "the content of an unfinished job is served (200) from whatever of its file exists yet",
	"delete-still-listed": "a deleted job stays in the list (the list's index is not updated by a delete)",
	"double-create":       "every video create runs twice: the second job is an orphan nobody is told of",
	"seconds-wrong":       "the video object's seconds is num_frames at 24 fps, whatever fps was asked",
	"second-job-lost":     "a job that arrives while another of its model is unfinished is accepted but never run, until deleted or its client leaves",
	"task-halved":         "every report of the Task time (timing, inference_time_s, the ledger) says half of it, consistently: other_ms absorbs the rest",
	"task-is-all":         "every report of a clip's time says the Task took all of it: task_call_wall_ms and inference_time_s the total, every other part 0, consistently",
	"uneven-frames":       "each odd frame of a clip is presented 0.4 of a frame late (the container's timestamps rewritten; count, average rate and duration unchanged)",
	"reference-cropped":   "an edit's reference of another aspect than the output's is cropped to the output's aspect (centred) before the family resizes it",
	"history-bytes":       "once a job of a second shape (size, frame count or reference size) was served, every later output has one pixel changed (a runtime whose bytes depend on what it served before)",
}

// FaultNames lists the faults, sorted.
func FaultNames() []string {
	names := make([]string, 0, len(Faults))
	for n := range Faults {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fault is the switched-on fault; a nil *fault is the healthy server, and every method is a
// no-op on it.
type fault struct {
	name       string
	bySize     sync.Map // "WxH" -> *atomic.Int64, the jobs of each size so far: for latency-spike
	polled     sync.Map // job id -> struct{}: for poll-500, which fails only the first poll
	downloaded sync.Map // job id -> struct{}: for refetch-fails
	shapes     sync.Map // output and reference sizes served: for history-bytes
	kept       sync.Map // job id -> artifact path: for content-undeleted
	regressed  sync.Map // job id -> polls of it completed: for status-regresses
	listed     sync.Map // job id -> *job deleted: for delete-still-listed
}

func newFault(name string) (*fault, error) {
	if name == "" {
		return nil, nil
	}
	if _, ok := Faults[name]; !ok {
		return nil, fmt.Errorf("unknown fault %q; known: %s", name, strings.Join(FaultNames(), ", "))
	}
	return &fault{name: name}, nil
}

func (f *fault) is(name string) bool { return f != nil && f.name == name }

// task wraps the model's Task for faults that act on the native call itself.
func (f *fault) task(t spec.Task) spec.Task {
	if f == nil {
		return t
	}
	return faultyTask{t, f}
}

type faultyTask struct {
	spec.Task
	f *fault
}

func (t faultyTask) Run(ctx context.Context, req spec.Request) (spec.Output, error) {
	switch {
	case t.f.is("job-fails"):
		return spec.Output{}, &spec.Error{Code: "injected_fault", Message: "fault job-fails"}
	case t.f.is("job-hangs"):
		<-ctx.Done()
		return spec.Output{}, ctx.Err()
	case t.f.is("latency-spike") && t.f.nthOfSize(req.Size) == 3:
		select {
		case <-time.After(3 * time.Second):
		case <-ctx.Done():
			return spec.Output{}, ctx.Err()
		}
	case t.f.is("actual-differs"):
		asked := req.Steps
		req.Steps = fewerSteps(asked)
		out, err := t.Task.Run(ctx, req)
		// What the server's own guard (checkActual) compares: a server without that guard
		// would serve this job, so the fault lets it through; product reports what ran.
		out.Actual.Steps = asked
		return out, err
	case t.f.is("seed-ignored"):
		asked := req.Seed
		req.Seed = 0
		out, err := t.Task.Run(ctx, req)
		out.Actual.Seed = asked
		return out, err
	case t.f.is("prompt-ignored"):
		req.Prompt = "a prompt the server puts in place of every one"
	case t.f.is("reference-cropped") && req.Reference != nil:
		req.Reference = croppedToAspect(req.Reference, req.Size)
	case t.f.is("ignore-reference") && req.Reference != nil:
		b := req.Reference.Bounds()
		grey := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		for i := range grey.Pix {
			grey.Pix[i] = 128
		}
		req.Reference = grey
	}
	return t.Task.Run(ctx, req)
}

// nthOfSize counts a job of size: latency-spike counts by size, so that the suite's own
// probes (another size) do not move the spike out of the measured requests at the pinned one.
func (f *fault) nthOfSize(size spec.Size) int64 {
	counter, _ := f.bySize.LoadOrStore(size.String(), new(atomic.Int64))
	return counter.(*atomic.Int64).Add(1)
}

// fewerSteps is the num_inference_steps actual-differs runs instead of n.
func fewerSteps(n int) int {
	if n > 1 {
		return n / 2
	}
	return 2
}

// product tampers with what a finished job reports it produced (its actual) and how long its
// Task took, after the server's own checks: the video object, the edit's answer and the ledger
// line all say it.
func (f *fault) product(p *Product, capability spec.Capability) {
	switch {
	case f.is("actual-differs"):
		p.Actual.Steps = fewerSteps(p.Actual.Steps) // honestly: the steps the Task ran
	case f.is("actual-unasked") && capability == spec.ImageEdit:
		p.Actual.NumFrames, p.Actual.FPS = 1, 24
	case f.is("task-halved"):
		p.TaskWall /= 2
	}
}

// allTask is t as task-is-all reports it: the Task took the whole time, nothing else any.
func (f *fault) allTask(t *Timing) *Timing {
	if !f.is("task-is-all") || t == nil || t.TotalMS == 0 {
		return t
	}
	return &Timing{TaskCallWallMS: t.TotalMS, TotalMS: t.TotalMS, StreamedFrames: t.StreamedFrames}
}

// frames tampers with checked output just before it is encoded, where the server's own
// checks can no longer see it. It never changes v's own pixels (v's digest is taken meanwhile).
func (f *fault) frames(v spec.Video, req spec.Request) spec.Video {
	switch {
	case f.is("wrong-frame-count") && v.N > 1:
		v.N--
		v.Pix = v.Pix[:v.N*v.FrameBytes()]
	case f.is("swaps-channels"):
		pix := append([]byte(nil), v.Pix...)
		for i := 0; i+2 < len(pix); i += 3 {
			pix[i], pix[i+2] = pix[i+2], pix[i]
		}
		v.Pix = pix
	case f.is("wrong-size"):
		c := spec.Video{W: v.W - 16, H: v.H, N: v.N}
		for i := 0; i < v.N; i++ {
			src := v.Frame(i)
			for y := 0; y < v.H; y++ {
				c.Pix = append(c.Pix, src[3*v.W*y:3*v.W*y+3*c.W]...)
			}
		}
		return c
	case f.is("downscaled"):
		return boxed(v, 2)
	case f.is("limited-range"):
		pix := make([]byte, len(v.Pix))
		for i, p := range v.Pix {
			pix[i] = uint8(16 + (int(p)*219+127)/255)
		}
		v.Pix = pix
	case f.is("nondeterministic"):
		pix := append([]byte(nil), v.Pix...)
		for k := 0; k < 16*v.N; k++ {
			pix[rand.IntN(len(pix)/3)*3] = uint8(rand.IntN(256))
		}
		v.Pix = pix
	case f.is("history-bytes"):
		shape := fmt.Sprintf("%dx%dx%d", v.W, v.H, v.N)
		if req.Reference != nil {
			shape += fmt.Sprintf(" from %dx%d", req.Reference.Bounds().Dx(), req.Reference.Bounds().Dy())
		}
		f.shapes.Store(shape, struct{}{})
		n := 0
		f.shapes.Range(func(any, any) bool { n++; return true })
		if n > 1 {
			pix := append([]byte(nil), v.Pix...)
			pix[0] ^= 0x80
			v.Pix = pix
		}
	case f.is("edit-unchanged") && req.Reference != nil && v.N == 1:
		img := image.NewRGBA(image.Rect(0, 0, v.W, v.H))
		draw.Draw(img, img.Rect, req.Reference, req.Reference.Bounds().Min, draw.Src)
		if c, err := spec.PackRGBA([]*image.RGBA{img}); err == nil {
			return c
		}
	}
	return v
}

// fps is the rate the encoder writes.
func (f *fault) fps(fps int) int {
	if f.is("wrong-fps") {
		return 2 * fps
	}
	return fps
}

// encoded acts on the finished file.
func (f *fault) encoded(path string) (changed bool, err error) {
	switch {
	case f.is("uneven-frames") && strings.HasSuffix(path, ".mp4"):
		// The same frames, stream-copied, each odd one's timestamp moved 0.4 of its duration.
		tmp := path + ".uneven.mp4"
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a stream copy: no run waits for ever
		defer cancel()
		out, err := exec.CommandContext(ctx, "ffmpeg", "-v", "error", "-nostdin", "-y", "-i", path, "-c", "copy",
			"-bsf:v", `setts=ts=PTS+if(mod(N\,2)\,DURATION*2/5\,0)`, "-movflags", "+faststart", "-f", "mp4", tmp).CombinedOutput()
		if err != nil {
			return false, fmt.Errorf("fault uneven-frames: %v: %s", err, out)
		}
		return true, os.Rename(tmp, path)
	case !f.is("corrupt-mp4"):
		return false, nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return true, os.Truncate(path, st.Size()/2)
}

// failPoll reports whether this poll of an unfinished job answers 500.
func (f *fault) failPoll(j *job) bool {
	if !f.is("poll-500") || j.status == "completed" || j.status == "failed" {
		return false
	}
	_, seen := f.polled.LoadOrStore(j.id, struct{}{})
	return !seen
}

// failRefetch reports whether this download of j's artifact answers 500 (every one after the
// first).
func (f *fault) failRefetch(id string) bool {
	if !f.is("refetch-fails") {
		return false
	}
	_, seen := f.downloaded.LoadOrStore(id, struct{}{})
	return seen
}

// fields tampers with a request's fields before they are resolved: clamps-steps puts a step
// count above the range at its top, as a server that substitutes instead of refusing does.
func (f *fault) fields(cp spec.Checkpoint, values map[string]string) {
	if !f.is("clamps-steps") {
		return
	}
	if n, err := strconv.Atoi(values["num_inference_steps"]); err == nil && n > cp.Controls.Steps.Max {
		values["num_inference_steps"] = strconv.Itoa(cp.Controls.Steps.Max)
	}
}

// ledgerLine tampers with a job's terminal ledger line.
func (f *fault) ledgerLine(e *LedgerEntry) {
	switch {
	case f.is("ledger-wrong-digest") && e.Output != nil:
		e.Output.SHA256 = strings.Repeat("0", 64)
	case f.is("no-task-wall") && e.Timing != nil:
		e.Timing.TaskCallWallMS = 0
	case f.is("task-overstated") && e.Timing != nil:
		e.Timing.TaskCallWallMS += 10000
	case f.is("task-is-total") && e.Timing != nil:
		e.Timing.TaskCallWallMS = e.Timing.TotalMS
	case f.is("task-is-all"):
		e.Timing = f.allTask(e.Timing)
	}
}

// boxed is v with each k x k box's mean written over the box: its size, the detail of a clip k
// times smaller.
func boxed(v spec.Video, k int) spec.Video {
	o := spec.Video{W: v.W, H: v.H, N: v.N, Pix: make([]byte, len(v.Pix))}
	for i := range v.N {
		src, dst := v.Frame(i), o.Frame(i)
		for by := 0; by < v.H; by += k {
			for bx := 0; bx < v.W; bx += k {
				for c := range 3 {
					sum, n := 0, 0
					for y := by; y < min(by+k, v.H); y++ {
						for x := bx; x < min(bx+k, v.W); x++ {
							sum += int(src[3*(y*v.W+x)+c])
							n++
						}
					}
					for y := by; y < min(by+k, v.H); y++ {
						for x := bx; x < min(bx+k, v.W); x++ {
							dst[3*(y*v.W+x)+c] = uint8((sum + n/2) / n)
						}
					}
				}
			}
		}
	}
	return o
}

// inferenceTime is the inference_time_s a finished job reports for a Task of s seconds.
func (f *fault) inferenceTime(s float64) float64 {
	switch {
	case f.is("inference-ms"):
		return s * 1000
	case f.is("inference-halved"):
		return s / 2
	}
	return s
}

// keepContent says whether a deleted job's artifact stays on disk, kept to be served after the
// delete (content-undeleted) or left behind (delete-leaves-files).
func (f *fault) keepContent(id, path string) bool {
	if f.is("content-undeleted") {
		f.kept.Store(id, path)
		return true
	}
	return f.is("delete-leaves-files")
}

// keptContent is the artifact content-undeleted still serves for a deleted job.
func (f *fault) keptContent(id string) (string, bool) {
	if !f.is("content-undeleted") {
		return "", false
	}
	path, ok := f.kept.Load(id)
	if !ok {
		return "", false
	}
	return path.(string), true
}

// load fails loading for load-fails.
func (f *fault) load() error {
	if f.is("load-fails") {
		return fmt.Errorf("fault load-fails: %s", Faults["load-fails"])
	}
	return nil
}

// exitStatus is what a clean shutdown returns for exit-nonzero.
func (f *fault) exitStatus() error {
	if f.is("exit-nonzero") {
		return fmt.Errorf("fault exit-nonzero: %s", Faults["exit-nonzero"])
	}
	return nil
}

// object tampers with a video object as every route answers it (s.mu held).
func (f *fault) object(j *job, o map[string]any) {
	switch {
	case f.is("completed-at-ms") && !j.completed.IsZero():
		o["completed_at"] = j.completed.UnixMilli()
	case f.is("seconds-wrong"):
		o["seconds"] = strconv.FormatFloat(float64(j.req.Settings.NumFrames)/24, 'f', -1, 64)
	case f.is("task-is-all"):
		if t, ok := o["timing"].(*Timing); ok && t.TotalMS > 0 {
			o["timing"], o["inference_time_s"] = f.allTask(t), t.TotalMS/1000
		}
	}
}

// poll tampers with a poll's answer for job j (s.mu held).
func (f *fault) poll(s *Server, j *job, o map[string]any) map[string]any {
	switch {
	case f.is("poll-other-job") && j.status == "completed":
		var other *job
		for _, k := range s.jobs {
			if k != j && k.kind == j.kind && (other == nil || k.created.After(other.created)) {
				other = k
			}
		}
		if other != nil {
			return s.videoObject(other)
		}
	case f.is("status-regresses") && j.status == "completed":
		n, _ := f.regressed.LoadOrStore(j.id, new(atomic.Int64))
		if n.(*atomic.Int64).Add(1) == 2 {
			o["status"], o["progress"], o["completed_at"] = "in_progress", 90, nil
		}
	}
	return o
}

// earlyContent says whether the content of unfinished job j is served anyway.
func (f *fault) earlyContent(j *job) bool {
	return f.is("content-early") && j.product == nil && j.err == nil
}

// forgotten keeps a deleted job listed, for delete-still-listed.
func (f *fault) forgotten(j *job) {
	if f.is("delete-still-listed") {
		f.listed.Store(j.id, j)
	}
}

// stillListed are the deleted jobs of kind a list still shows.
func (f *fault) stillListed(kind spec.Capability) []*job {
	var out []*job
	if f.is("delete-still-listed") {
		f.listed.Range(func(_, v any) bool {
			if j := v.(*job); j.kind == kind {
				out = append(out, j)
			}
			return true
		})
	}
	return out
}

// twin is the orphan double-create runs beside j: the same request, a job of its own.
func (f *fault) twin(s *Server, j *job) *job {
	if !f.is("double-create") {
		return nil
	}
	t := s.newJob("video_", ".mp4", j.kind, j.lane, j.req, requestInfo{route: j.route, base: j.base, inputs: j.inputs, received: j.received, bodyRead: j.bodyRead})
	return t
}

// lose says whether j, arriving while another job of its lane is unfinished, is to be lost
// (s.mu held): accepted, never run, ended only when cancelled.
func (f *fault) lose(s *Server, j *job) bool {
	if !f.is("second-job-lost") {
		return false
	}
	for _, k := range s.jobs {
		if k.lane == j.lane && k.completed.IsZero() {
			return true
		}
	}
	return false
}

// croppedToAspect is ref's centre at size's aspect ratio (ref itself when it has it already).
func croppedToAspect(ref image.Image, size spec.Size) image.Image {
	b := ref.Bounds()
	w, h := b.Dx(), b.Dy()
	if w*size.H == h*size.W {
		return ref
	}
	cw, ch := w, w*size.H/size.W
	if ch > h {
		cw, ch = h*size.W/size.H, h
	}
	out := image.NewRGBA(image.Rect(0, 0, cw, ch))
	draw.Draw(out, out.Rect, ref, image.Pt(b.Min.X+(w-cw)/2, b.Min.Y+(h-ch)/2), draw.Src)
	return out
}
