package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mediaqual/mediaqual/models/spec"
)

// requestInfo is what a job keeps of the HTTP request that created it.
type requestInfo struct {
	requestID, correlationID, route, base string
	inputs                                map[string]string
	received                              time.Time // the handler began: the body is read and checked from here
	bodyRead                              time.Time // the body was in: the client's upload ends here
}

func (s *Server) newRequestInfo(r *http.Request, route string, received, bodyRead time.Time) requestInfo {
	return requestInfo{
		requestID: requestID(r), correlationID: correlationID(r),
		route: route, base: s.baseURL(r), inputs: map[string]string{}, received: received, bodyRead: bodyRead,
	}
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// laneFor dispatches on declared capability: a model is used for a route only if it says it
// can do that workload.
func (s *Server) laneFor(model string, want spec.Capability) (*lane, *apiError) {
	if model == "" {
		return nil, invalid("model", "model is required; served: %s", strings.Join(s.order, ", "))
	}
	l, ok := s.lanes[model]
	if !ok {
		return nil, errf(http.StatusNotFound, "model_not_found", "model", "model %q is not served; served: %s", model, strings.Join(s.order, ", "))
	}
	if !l.model.Checkpoint.Has(want) {
		return nil, errf(http.StatusBadRequest, "model_capability_mismatch", "model",
			"model %s does not declare %s (it declares %v)", model, want, l.model.Checkpoint.Capabilities)
	}
	return l, nil
}

func (s *Server) createVideo(w http.ResponseWriter, r *http.Request) {
	const route = "POST /v1/videos"
	received := time.Now()
	f, held, e := s.readBody(w, r, true, min(s.cfg.MaxBodyBytes, maxVideoBody))
	held.release() // a video takes no file: nothing of the body is kept
	bodyRead := time.Now()
	if e != nil {
		s.reject(w, r, route, "", e)
		return
	}
	model := f.values["model"]
	delete(f.values, "model")
	if name := firstKey(f.files); name != "" {
		s.reject(w, r, route, model, unsupportedParam(name, "file field %q is not accepted: text_to_video takes no input reference", name))
		return
	}
	l, e := s.laneFor(model, spec.TextToVideo)
	if e != nil {
		s.reject(w, r, route, model, e)
		return
	}
	s.fault.fields(l.model.Checkpoint, f.values)
	settings, e := Resolve(l.model.Checkpoint, spec.TextToVideo, f.values, nil)
	if e != nil {
		s.reject(w, r, route, model, e)
		return
	}
	info := s.newRequestInfo(r, route, received, bodyRead)
	info.inputs["prompt_sha256"] = digest([]byte(settings.Prompt))
	j := s.newJob("video_", ".mp4", spec.TextToVideo, l, spec.Request{Settings: settings}, info)
	if !s.admit(w, r, route, j) {
		return
	}
	if t := s.fault.twin(s, j); t != nil {
		_, _ = s.enqueue(t)
	}
	s.mu.Lock()
	obj := s.videoObject(j)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

// admit enqueues j or answers the refusal (429 with Retry-After when the lane is full).
func (s *Server) admit(w http.ResponseWriter, r *http.Request, route string, j *job) bool {
	e, wait := s.enqueue(j)
	if e == nil {
		return true
	}
	if e.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(wait)))
	}
	s.reject(w, r, route, j.lane.model.Checkpoint.ID, e)
	return false
}

// videoObject is the OpenAI video object plus what was produced and how long it took. Call
// with s.mu held.
func (s *Server) videoObject(j *job) map[string]any {
	st := j.req.Settings
	o := map[string]any{
		"id": j.id, "object": "video", "model": j.lane.model.Checkpoint.ID, "status": j.status,
		"progress": j.progress, "created_at": j.created.Unix(), "completed_at": nil, "expires_at": nil,
		"error": nil, "prompt": st.Prompt, "size": st.Size.String(), "request_id": j.requestID,
		"seconds":  strconv.FormatFloat(float64(st.NumFrames)/float64(st.FPS), 'f', -1, 64),
		"settings": st,
	}
	if !j.completed.IsZero() {
		o["completed_at"], o["expires_at"] = j.completed.Unix(), j.expires.Unix()
	}
	if j.err != nil {
		o["error"] = j.err
	}
	if p := j.product; p != nil {
		o["url"] = j.base + "/v1/videos/" + j.id + "/content"
		o["actual"] = p.Actual
		o["inference_time_s"] = s.fault.inferenceTime(p.TaskWall.Seconds()) // AIPerf reads these two
		o["peak_memory_mb"] = p.PeakMemoryMB
		o["sha256"] = p.SHA256
	}
	if !j.started.IsZero() {
		o["timing"] = j.timing()
	}
	s.fault.object(j, o)
	return o
}

func (s *Server) getVideo(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	j, e := s.lookup(r.PathValue("id"), spec.TextToVideo)
	if e == nil && s.fault.failPoll(j) {
		e = errf(http.StatusInternalServerError, "injected_fault", "", "fault poll-500")
	}
	if hold := s.cfg.PollHold; e == nil && hold > 0 && j.completed.IsZero() {
		// A long poll: the answer waits for the job's next change (a new status or progress),
		// at most hold, so a client polling every interval learns of the end when it happens
		// instead of up to an interval later.
		changed := j.changed
		s.mu.Unlock()
		t := time.NewTimer(hold)
		select {
		case <-changed:
		case <-t.C:
		case <-r.Context().Done():
		case <-s.stop:
		}
		t.Stop()
		s.mu.Lock()
		j, e = s.lookup(r.PathValue("id"), spec.TextToVideo) // as a poll now would find it
	}
	if e != nil {
		s.mu.Unlock()
		writeError(w, e)
		return
	}
	obj := s.fault.poll(s, j, s.videoObject(j))
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, obj)
}

func (s *Server) listVideos(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, invalid("limit", "limit must be an integer in 1..100, got %q", v))
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order == "" {
		order = "desc"
	}
	if order != "asc" && order != "desc" {
		writeError(w, invalid("order", "order must be asc or desc, got %q", order))
		return
	}
	s.mu.Lock()
	var all []*job
	for _, j := range s.jobs {
		if j.kind == spec.TextToVideo {
			all = append(all, j)
		}
	}
	all = append(all, s.fault.stillListed(spec.TextToVideo)...)
	sort.Slice(all, func(a, b int) bool {
		if !all[a].created.Equal(all[b].created) {
			return all[a].created.Before(all[b].created) == (order == "asc")
		}
		return (all[a].id < all[b].id) == (order == "asc")
	})
	if after := q.Get("after"); after != "" {
		i := slices.IndexFunc(all, func(j *job) bool { return j.id == after })
		if i < 0 {
			s.mu.Unlock()
			writeError(w, invalid("after", "no video with id %q to page after", after))
			return
		}
		all = all[i+1:]
	}
	more := len(all) > limit
	all = all[:min(limit, len(all))]
	data := make([]map[string]any, len(all))
	for i, j := range all {
		data[i] = s.videoObject(j)
	}
	s.mu.Unlock()
	page := map[string]any{"object": "list", "data": data, "has_more": more}
	if len(data) > 0 {
		page["first_id"], page["last_id"] = data[0]["id"], data[len(data)-1]["id"]
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) videoContent(w http.ResponseWriter, r *http.Request) {
	s.serveArtifact(w, r, spec.TextToVideo, "video/mp4")
}

func (s *Server) imageContent(w http.ResponseWriter, r *http.Request) {
	s.serveArtifact(w, r, spec.ImageEdit, "image/png")
}

func (s *Server) serveArtifact(w http.ResponseWriter, r *http.Request, kind spec.Capability, contentType string) {
	s.mu.Lock()
	j, e := s.lookup(r.PathValue("id"), kind)
	if kept, ok := s.fault.keptContent(r.PathValue("id")); e != nil && ok {
		e = nil
		j = &job{id: r.PathValue("id"), path: kept, product: &Product{}}
	}
	if e == nil && s.fault.earlyContent(j) {
		s.mu.Unlock()
		w.Header().Set("Content-Type", contentType)
		if b, err := os.ReadFile(j.path); err == nil {
			_, _ = w.Write(b)
		}
		return
	}
	if e == nil && j.product == nil {
		e = errf(http.StatusConflict, "job_not_complete", "id", "%s is %s; content exists only once it is completed", j.id, j.status)
	}
	if e == nil && s.fault.failRefetch(j.id) {
		e = errf(http.StatusInternalServerError, "injected_fault", "id", "fault refetch-fails")
	}
	var f *os.File
	if e == nil {
		// Opened under the lock: a delete racing this download unlinks the name, but the open
		// file stays readable until we are done.
		var err error
		if f, err = os.Open(j.path); err != nil {
			e = errf(http.StatusInternalServerError, "artifact_missing", "id", "artifact of %s is missing: %v", j.id, err)
		}
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", contentType)
	if st, err := f.Stat(); err == nil {
		w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.writeTime(st.Size())))
	}
	_, _ = io.Copy(w, f)
}

func (s *Server) deleteVideo(w http.ResponseWriter, r *http.Request) {
	s.deleteJob(w, r, spec.TextToVideo, "DELETE /v1/videos", "video.deleted")
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	s.deleteJob(w, r, spec.ImageEdit, "DELETE /v1/images", "image.deleted")
}

// deleteJob cancels a queued or running job and removes its files; the job's own terminal
// ledger line follows when its lane lets go of it.
func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request, kind spec.Capability, route, object string) {
	s.mu.Lock()
	j, e := s.lookup(r.PathValue("id"), kind)
	var removed []string
	if e == nil && !s.fault.is("delete-keeps-job") {
		removed = s.forget(j, "deleted")
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, e)
		return
	}
	s.ledger.write(LedgerEntry{
		Event: "delete", RequestID: requestID(r), CorrelationID: correlationID(r),
		Route: route, Model: j.lane.model.Checkpoint.ID, JobID: j.id, Status: "deleted", FilesRemoved: removed,
	}, true)
	writeJSON(w, http.StatusOK, map[string]any{"id": j.id, "object": object, "deleted": true})
}

func (s *Server) createEdit(w http.ResponseWriter, r *http.Request) {
	const route = "POST /v1/images/edits"
	received := time.Now()
	f, held, e := s.readBody(w, r, false, s.cfg.MaxBodyBytes)
	bodyRead := time.Now()
	if e != nil {
		s.reject(w, r, route, "", e)
		return
	}
	model := f.values["model"]
	refSize, refBytes, refSum, respFormat, cost, e := s.editInputs(f)
	if e == nil {
		_, e = s.laneFor(model, spec.ImageEdit)
	}
	var l *lane
	var settings spec.Settings
	if e == nil {
		l = s.lanes[model]
		s.fault.fields(l.model.Checkpoint, f.values)
		settings, e = Resolve(l.model.Checkpoint, spec.ImageEdit, f.values, refSize)
	}
	decode := e == nil && !decodesReferenceFile(l.model.Task) // a worker decodes the upload itself
	if decode {
		e = s.chargeDecode(held, cost)
	}
	if e != nil {
		held.release()
		s.reject(w, r, route, model, e)
		return
	}
	info := s.newRequestInfo(r, route, received, bodyRead)
	info.inputs["prompt_sha256"] = digest([]byte(settings.Prompt))
	info.inputs["reference_sha256"] = refSum
	info.inputs["reference_size"] = refSize.String()
	j := s.newJob("img_", ".png", spec.ImageEdit, l, spec.Request{Settings: settings, ReferenceFile: refBytes}, info)
	j.inline, j.decode, j.mem = respFormat == "b64_json", decode, held
	if !s.admit(w, r, route, j) {
		held.release()
		return
	}
	// The answer may wait for the queue and the Task: no write deadline until it is ready.
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	select {
	case <-j.done:
	case <-r.Context().Done(): // the client left: the work is no longer wanted
		s.mu.Lock()
		s.forget(j, "cancelled: client disconnected")
		s.mu.Unlock()
		<-j.done
		return
	}
	s.mu.Lock()
	answer := int64(0)
	if j.product != nil {
		answer = int64(len(j.product.Inline)) * 4 / 3
	}
	s.mu.Unlock()
	_ = rc.SetWriteDeadline(time.Now().Add(s.writeTime(answer)))
	s.respondEdit(w, j)
}

// editInputs validates the route-level edit fields and the one reference image's header and
// size (reference.go: the image is decoded later, off the request), and digests the upload.
func (s *Server) editInputs(f *form) (size *spec.Size, upload []byte, sum, respFormat string, cost int64, e *apiError) {
	for _, name := range sortedKeys(f.files) {
		switch name {
		case "image", "image[]":
		case "mask":
			return nil, nil, "", "", 0, unsupportedParam("mask", "masks are outside the image_edit workload: the whole image is edited")
		default:
			return nil, nil, "", "", 0, unsupportedParam(name, "unknown file field %q; send the reference as image", name)
		}
	}
	refs := append(f.files["image"], f.files["image[]"]...)
	switch {
	case len(refs) == 0:
		return nil, nil, "", "", 0, invalid("image", "a reference image file is required in field image")
	case len(refs) > 1:
		return nil, nil, "", "", 0, unsupportedValue("image", "exactly one reference image is accepted, got %d", len(refs))
	}
	if n, ok := f.values["n"]; ok && strings.TrimSpace(n) != "1" {
		return nil, nil, "", "", 0, unsupportedValue("n", "n must be 1, got %q", n)
	}
	respFormat = "b64_json"
	if v, ok := f.values["response_format"]; ok {
		if v != "b64_json" && v != "url" {
			return nil, nil, "", "", 0, unsupportedValue("response_format", "response_format must be b64_json or url, got %q", v)
		}
		respFormat = v
	}
	if v, ok := f.values["output_format"]; ok && v != "png" {
		return nil, nil, "", "", 0, unsupportedValue("output_format", "output_format must be png, got %q", v)
	}
	for _, k := range []string{"model", "n", "response_format", "output_format"} {
		delete(f.values, k)
	}
	if size, cost, e = checkReference(refs[0], s.cfg.MaxPixels); e != nil {
		return nil, nil, "", "", 0, e
	}
	return size, refs[0], digest(refs[0]), respFormat, cost, nil
}

func (s *Server) respondEdit(w http.ResponseWriter, j *job) {
	s.mu.Lock()
	p, jerr, timing := j.product, j.err, j.timing()
	keep := !j.inline && p != nil && !j.deleted
	if !keep && !j.deleted {
		s.forget(j, "returned inline") // b64_json keeps nothing on the server
	}
	s.mu.Unlock()
	switch {
	case p == nil:
		status := http.StatusInternalServerError
		if jerr.badInput {
			status = http.StatusBadRequest
		}
		writeError(w, errf(status, jerr.Code, jerr.param, "%s", jerr.Message))
		return
	case !keep && p.Inline == nil:
		writeError(w, errf(http.StatusInternalServerError, "artifact_missing", "", "the edited image of %s is missing", j.id))
		return
	}
	answer := map[string]any{
		"id": j.id, "created": j.created.Unix(), "model": j.lane.model.Checkpoint.ID,
		"size":          fmt.Sprintf("%dx%d", p.Actual.Width, p.Actual.Height),
		"output_format": "png", "actual": p.Actual, "timing": timing, "sha256": p.SHA256,
		"inference_time_s": s.fault.inferenceTime(p.TaskWall.Seconds()), "peak_memory_mb": p.PeakMemoryMB,
		"expires_at": expiresOrNil(keep, j.expires),
	}
	if keep {
		answer["data"] = []any{map[string]any{"url": j.base + "/v1/images/" + j.id + "/content"}}
		writeJSON(w, http.StatusOK, answer)
		return
	}
	writeInlineImage(w, p.Inline, answer)
}

// writeInlineImage writes the JSON answer {"data":[{"b64_json": image}], ...fields}, its length
// known up front, the image base64-encoded on every core straight into the body and written
// piece by piece as the pieces are ready, so the client reads while the rest is encoded. On the
// H200 host this and the PNG kept in memory took 4-5 ms off a 1024² edit's answer against one
// encoder streaming through a buffer (docs/PERFORMANCE.md); encoding/json would first build the
// megabytes of base64 as a string, then scan and copy them again (BenchmarkInlineImage).
func writeInlineImage(w http.ResponseWriter, image []byte, fields map[string]any) {
	var rest bytes.Buffer
	enc := json.NewEncoder(&rest)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(fields) // "{...}\n"; fields are never empty
	const head, tail = `{"data":[{"b64_json":"`, `"}],`
	parts := encodeBase64(image)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+base64.StdEncoding.EncodedLen(len(image))+len(tail)+rest.Len()-1))
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, head)
	for i := range parts { // by index: a copy of parts[i] would read b64 before done
		<-parts[i].done
		_, _ = w.Write(parts[i].b64)
	}
	_, _ = io.WriteString(w, tail)
	_, _ = w.Write(rest.Bytes()[1:])
}

// encodeBase64 starts base64.StdEncoding's encoding of src on every core, in pieces of
// base64Piece bytes taken in order (a multiple of 3: no padding but the last's), each into a
// buffer of its own, allocated by the core that fills it.
func encodeBase64(src []byte) []base64Part {
	parts := make([]base64Part, (len(src)+base64Piece-1)/base64Piece)
	for i := range parts {
		parts[i].done = make(chan struct{})
	}
	var next atomic.Int64
	for range min(len(parts), runtime.GOMAXPROCS(0)) {
		go func() {
			for i := int(next.Add(1)) - 1; i < len(parts); i = int(next.Add(1)) - 1 {
				raw := src[i*base64Piece : min(len(src), (i+1)*base64Piece)]
				parts[i].b64 = make([]byte, base64.StdEncoding.EncodedLen(len(raw)))
				base64.StdEncoding.Encode(parts[i].b64, raw)
				close(parts[i].done)
			}
		}()
	}
	return parts
}

// base64Part is one piece of encodeBase64's output: b64 may be read once done is closed.
type base64Part struct {
	b64  []byte
	done chan struct{}
}

const base64Piece = 3 << 16 // 192 KiB of image, 256 KiB of base64

func expiresOrNil(keep bool, t time.Time) any {
	if !keep {
		return nil
	}
	return t.Unix()
}

func firstKey[V any](m map[string]V) string {
	if keys := sortedKeys(m); len(keys) > 0 {
		return keys[0]
	}
	return ""
}

func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	data := make([]map[string]any, 0, len(s.order))
	for _, id := range s.order {
		data = append(data, s.modelObject(s.lanes[id]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func (s *Server) getModel(w http.ResponseWriter, r *http.Request) {
	l, ok := s.lanes[r.PathValue("id")]
	if !ok {
		writeError(w, errf(http.StatusNotFound, "model_not_found", "id", "model %q is not served; served: %s", r.PathValue("id"), strings.Join(s.order, ", ")))
		return
	}
	writeJSON(w, http.StatusOK, s.modelObject(l))
}

// defaultFields is the row's pinned settings under the request fields' names: the guidance
// under the row's guidance_param (guidance_scale or true_cfg_scale), not spec.Settings' name.
func defaultFields(cp spec.Checkpoint) map[string]any {
	d := cp.Defaults
	o := map[string]any{
		"prompt": d.Prompt, "size": d.Size.String(), "num_inference_steps": d.Steps,
		cp.Controls.GuidanceParam: d.Guidance, "seed": d.Seed,
	}
	if d.NegativePrompt != "" {
		o["negative_prompt"] = d.NegativePrompt
	}
	if d.NumFrames > 0 {
		o["num_frames"], o["fps"] = d.NumFrames, d.FPS
	}
	return o
}

func (s *Server) modelObject(l *lane) map[string]any {
	cp := l.model.Checkpoint
	o := map[string]any{
		"id": cp.ID, "object": "model", "owned_by": "mediaserve", "created": 0,
		"family": cp.Family, "profile": cp.Profile, "revision": cp.Revision, "precision": cp.Precision,
		"capabilities": cp.Capabilities, "controls": cp.Controls, "defaults": defaultFields(cp),
		"runtime": l.model.Runtime, "queue_capacity": cap(l.queue), "lanes": len(l.tasks),
	}
	if len(l.model.Devices) > 0 {
		o["lane_devices"] = l.model.Devices
	}
	if cp.Layout != "" {
		o["layout"] = cp.Layout // the one served
	}
	if len(cp.Layouts) > 0 {
		o["layouts"] = cp.Layouts // the ones the row offers, preferred first
	}
	if pr, ok := l.tasks[0].(spec.ParityReporter); ok && pr.Parity() != nil {
		o["parity"] = pr.Parity() // the first lane's; every lane passed its own before ready
	}
	if s.fault != nil {
		o["fault"] = s.fault.name + ": " + Faults[s.fault.name]
	}
	return o
}
