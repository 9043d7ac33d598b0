package jobmodel

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/mediaqual/mediaqual/harness/wire"
)

// Kind is what an exchange does to the job API.
type Kind string

// The kinds of exchange the model holds; every other exchange (models, health, probes of an
// error's shape) is recorded as Other and held to nothing here.
const (
	Create  Kind = "create"
	Poll    Kind = "poll"
	Content Kind = "content"
	Delete  Kind = "delete"
	List    Kind = "list"
	Edit    Kind = "edit"
	Other   Kind = "other"
)

// Op is one exchange: a request the suite (or AIPerf) sent and the answer it got, with the
// client's own send and receive times. Nothing in it is the server's word about time except
// the timestamps inside Object.
type Op struct {
	N         int    // its place in the history
	Kind      Kind   // what it does
	By        string // "suite", or "aiperf" for a record of AIPerf's export
	Method    string // the HTTP method and path (with query) asked
	Path      string
	RequestID string // the X-Request-ID sent
	Job       string // the job the request names (poll, content, delete), or the create's answer id
	// Fields are a create's or edit's request fields as text; Files the sha256 of each file part.
	Fields map[string]string
	Files  map[string]string
	// Sent is when the request was handed to the transport, Received when its answer had been
	// read whole (zero for AIPerf's records, whose times are not the suite's clock).
	Sent, Received time.Time
	Status         int      // HTTP status; 0: no answer (Err says why)
	Code           string   // the error envelope's code, on a non-2xx answer
	Object         *Object  // the job object the answer carries (create, poll, a delete answered with the job)
	Listed         []Object // a list page's jobs
	HasMore        bool     // a list page that says more follow
	Digest         string   // content: sha256 of the bytes; edit: of the image it answered
	Bytes          int      // the answer's length
	Err            string
}

// OK reports whether the answer was 2xx.
func (o Op) OK() bool { return o.Status >= 200 && o.Status < 300 }

// String names the exchange for a violation's message: "#12 poll GET /v1/videos/v1 -> 200 (in_progress)".
func (o Op) String() string {
	s := fmt.Sprintf("#%d %s %s %s", o.N, o.Kind, o.Method, o.Path)
	if o.By != "suite" {
		s += " (" + o.By + ")"
	}
	switch {
	case o.Status == 0 && o.Err != "":
		s += " -> no answer: " + o.Err
	case o.Status != 0:
		s += fmt.Sprintf(" -> %d", o.Status)
	}
	if o.Code != "" {
		s += " " + o.Code
	}
	if o.Object != nil {
		s += fmt.Sprintf(" (id %s, %s)", o.Object.ID, o.Object.Status)
	}
	return s
}

// Object is a job object as the model reads it, in the contract's terms whatever the server's
// dialect (wire.Profile.ParseVideo maps its statuses).
type Object struct {
	ID, Model, Status string
	Progress          *float64
	// Unix seconds, as the contract writes them; nil where the object does not say.
	CreatedAt, CompletedAt, ExpiresAt *int64
	Seconds, Size                     string
	Prompt                            string
	RequestID                         string // the create's X-Request-ID, where the server says it (request_id)
}

// History is one row's exchanges, in the order they were sent. It is safe for concurrent use:
// the concurrency probe records from several goroutines.
type History struct {
	Profile wire.Profile
	mu      sync.Mutex
	ops     []Op
}

// NewHistory is an empty history of exchanges with a server of profile p.
func NewHistory(p wire.Profile) *History { return &History{Profile: p} }

// Ops is a copy of the history. A nil *History records nothing and holds nothing.
func (h *History) Ops() []Op {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Add appends an exchange recorded elsewhere (AIPerf's records) and returns its place.
func (h *History) Add(o Op) int {
	if h == nil {
		return -1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	o.N = len(h.ops)
	if o.By == "" {
		o.By = "suite"
	}
	h.ops = append(h.ops, o)
	return o.N
}

// AddAnswer appends an exchange recorded elsewhere (AIPerf's records), its answer read from
// body as the model reads the suite's own.
func (h *History) AddAnswer(o Op, body []byte) int {
	if h == nil {
		return -1
	}
	answer(&o, h.Profile, body)
	return h.Add(o)
}

func (h *History) set(n int, o Op) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.N = n
	h.ops[n] = o
}

// Transport records every exchange made through it, then hands it on to base: the suite's
// HTTP client for a row goes through one, so the history holds whatever the suite asked,
// whichever stage asked it.
func (h *History) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if h == nil {
		return base
	}
	return recorder{h, base}
}

type recorder struct {
	h    *History
	base http.RoundTripper
}

func (r recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	op := Op{Method: req.Method, Path: req.URL.RequestURI(), RequestID: req.Header.Get("X-Request-ID")}
	op.Kind, op.Job = r.h.classify(req.Method, req.URL)
	if op.Kind == Create || op.Kind == Edit {
		op.Fields, op.Files = requestFields(req)
	}
	op.Sent = time.Now()
	n := r.h.Add(op)
	resp, err := r.base.RoundTrip(req)
	if err != nil {
		op.Received, op.Err = time.Now(), err.Error()
		r.h.set(n, op)
		return nil, err
	}
	resp.Body = &recordedBody{ReadCloser: resp.Body, h: r.h, n: n, op: op, resp: resp, sum: sha256.New()}
	return resp, nil
}

// recordedBody completes its exchange's Op when the answer has been read to its end or closed.
type recordedBody struct {
	io.ReadCloser
	h    *History
	n    int
	op   Op
	resp *http.Response
	buf  bytes.Buffer
	sum  hash.Hash // of the whole answer, however long
	done bool
}

// keep is how much of an answer is kept to parse: job objects and edit answers (an image as
// base64) fit; a video need not (its digest is taken as it streams).
const keep = 64 << 20

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.sum.Write(p[:n])
	if b.buf.Len() < keep {
		b.buf.Write(p[:n])
	}
	b.op.Bytes += n
	if err == io.EOF {
		b.finish("")
	} else if err != nil {
		b.finish(err.Error())
	}
	return n, err
}

func (b *recordedBody) Close() error {
	b.finish("")
	return b.ReadCloser.Close()
}

func (b *recordedBody) finish(readErr string) {
	if b.done {
		return
	}
	b.done = true
	op := b.op
	op.Received, op.Status, op.Err = time.Now(), b.resp.StatusCode, readErr
	answer(&op, b.h.Profile, b.buf.Bytes())
	if op.Kind == Content && op.OK() {
		op.Digest = hex.EncodeToString(b.sum.Sum(nil))
	}
	b.h.set(b.n, op)
}

// classify names what a request does by the profile's routes, and the job it names.
func (h *History) classify(method string, u *url.URL) (Kind, string) {
	p := h.Profile
	route := func(r string) (string, string, string) { // method, path before {id}, after
		m, path, _ := strings.Cut(r, " ")
		before, after, _ := strings.Cut(path, "{id}")
		return m, before, after
	}
	path := u.EscapedPath()
	for _, c := range []struct {
		kind  Kind
		route string
	}{{Content, p.VideoContent}, {Delete, p.DeleteVideo}, {Poll, p.PollVideo}} {
		m, before, after := route(c.route)
		if method != m || !strings.HasPrefix(path, before) || !strings.HasSuffix(path, after) || len(path) <= len(before)+len(after) {
			continue
		}
		id, err := url.PathUnescape(path[len(before) : len(path)-len(after)])
		if err != nil || strings.Contains(id, "/") {
			continue
		}
		return c.kind, id
	}
	if m, create, _ := route(p.CreateVideo); path == create {
		switch method {
		case m:
			return Create, ""
		case http.MethodGet:
			return List, ""
		}
	}
	if m, edit, _ := route(p.EditImage); path == edit && method == m {
		return Edit, ""
	}
	return Other, ""
}

// requestFields reads a create's or edit's body (multipart or JSON) without consuming it.
func requestFields(req *http.Request) (map[string]string, map[string]string) {
	if req.GetBody == nil {
		return nil, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, nil
	}
	defer body.Close()
	fields, files := map[string]string{}, map[string]string{}
	mt, params, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(part)
			if part.FileName() != "" {
				files[part.FormName()] = digest(b)
			} else {
				fields[part.FormName()] = string(b)
			}
		}
	case "application/json":
		var m map[string]any
		if json.NewDecoder(body).Decode(&m) == nil {
			for k, v := range m {
				if s, ok := v.(string); ok {
					fields[k] = s
				} else {
					b, _ := json.Marshal(v)
					fields[k] = string(b)
				}
			}
		}
	}
	return fields, files
}

// answer reads what the model needs of an answer: the job object, the list's ids, the content's
// digest, the edit's image digest, the error's code.
func answer(op *Op, p wire.Profile, body []byte) {
	if !op.OK() {
		var env struct {
			Error struct {
				Code any `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(body, &env) == nil && env.Error.Code != nil {
			op.Code = fmt.Sprint(env.Error.Code)
		}
		// A failed job answered with a non-2xx status and the job (vLLM-Omni) is still the job.
		if op.Kind == Poll {
			op.Object = parseObject(p, body)
		}
		return
	}
	switch op.Kind {
	case Create, Poll, Delete:
		if op.Object = parseObject(p, body); op.Kind == Create && op.Object != nil {
			op.Job = op.Object.ID
		}
	case List:
		var page struct {
			Data    []json.RawMessage `json:"data"`
			HasMore bool              `json:"has_more"`
		}
		if json.Unmarshal(body, &page) == nil {
			op.HasMore = page.HasMore
			for _, raw := range page.Data {
				if o := parseObject(p, raw); o != nil {
					op.Listed = append(op.Listed, *o)
				}
			}
		}
	case Edit:
		var e struct {
			Model string `json:"model"`
			Size  string `json:"size"`
			Data  []struct {
				B64 string `json:"b64_json"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &e) == nil {
			op.Object = &Object{Model: e.Model, Size: e.Size}
			if len(e.Data) == 1 {
				if img, err := base64.StdEncoding.DecodeString(e.Data[0].B64); err == nil && len(img) > 0 {
					op.Digest = digest(img)
				}
			}
		}
	}
}

// parseObject reads a job object; nil when the body is not one (no id, or a deleted-object
// answer of the contract's shape, which carries no status).
func parseObject(p wire.Profile, body []byte) *Object {
	var raw struct {
		ID          string   `json:"id"`
		Object      string   `json:"object"`
		Model       string   `json:"model"`
		Status      string   `json:"status"`
		Progress    *float64 `json:"progress"`
		CreatedAt   *int64   `json:"created_at"`
		CompletedAt *int64   `json:"completed_at"`
		ExpiresAt   *int64   `json:"expires_at"`
		Seconds     any      `json:"seconds"`
		Size        string   `json:"size"`
		Prompt      string   `json:"prompt"`
		RequestID   string   `json:"request_id"`
	}
	if json.Unmarshal(body, &raw) != nil || raw.ID == "" || raw.Status == "" {
		return nil
	}
	o := &Object{ID: raw.ID, Model: raw.Model, Progress: raw.Progress, CreatedAt: raw.CreatedAt,
		CompletedAt: raw.CompletedAt, ExpiresAt: raw.ExpiresAt, Size: raw.Size, Prompt: raw.Prompt, RequestID: raw.RequestID}
	if o.Status = p.Statuses[raw.Status]; o.Status == "" {
		o.Status = raw.Status // not the contract's: the status rule names it
	}
	if raw.Status == p.Deleted && p.Deleted != "" {
		o.Status = "deleted"
	}
	if raw.Seconds != nil {
		o.Seconds = fmt.Sprint(raw.Seconds)
	}
	return o
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
