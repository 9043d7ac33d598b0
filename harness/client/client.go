// Package client is a small, strict client of the media API described in docs/API.md: models,
// text-to-video jobs and image edits. It knows the wire format and nothing about particular
// models.
//
// Every error it returns names the route (method and path) and, when the server answered,
// the HTTP status, the error envelope (code, param, message) and the X-Request-ID. Errors from
// non-2xx answers are *APIError (use errors.As).
package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/wire"
)

// DefaultPollEvery is WaitVideo's cadence when Client.PollEvery is zero.
const DefaultPollEvery = 250 * time.Millisecond

// Job statuses (docs/API.md).
const (
	StatusQueued     = api.StatusQueued
	StatusInProgress = api.StatusInProgress
	StatusCompleted  = api.StatusCompleted
	StatusFailed     = api.StatusFailed
)

// Client talks to one server.
type Client struct {
	BaseURL   string        // e.g. "http://127.0.0.1:8000"; a trailing slash is ignored
	HTTP      *http.Client  // nil: one with DefaultTimeout (never http.DefaultClient, which has none)
	APIKey    string        // sent as "Authorization: Bearer <key>" when non-empty
	PollEvery time.Duration // WaitVideo's stated cadence (default 250 ms)
	// Profile is the server's dialect: its routes for create, poll, content, delete and edit,
	// and the bodies create accepts (multipart preferred, else JSON). Zero: wire.Mediaserve,
	// the contract's routes. Listing is GET on the create route; models and image delete are
	// the contract's.
	Profile wire.Profile
}

// profile is the client's dialect: Profile, or wire.Mediaserve where it is zero.
func (c *Client) profile() wire.Profile {
	if c.Profile.Name == "" {
		return wire.Mediaserve
	}
	return c.Profile
}

// route is a profile route's method and path, the job id filled in.
func (c *Client) route(of func(wire.Profile) string, id string) (method, path string) {
	p := c.profile()
	return p.Path(of(p), url.PathEscape(id))
}

// createBody encodes a create request as the profile accepts it: multipart/form-data with every
// value a text field (as AIPerf sends it) where it can, else a JSON object of the fields.
func (c *Client) createBody(fields map[string]string) (io.Reader, string, error) {
	p := c.profile()
	encodings := p.CreateEncodings
	switch {
	case slices.Contains(encodings, "multipart"):
		return multipartBody(fields, nil)
	case slices.Contains(encodings, "json"):
		b, err := json.Marshal(fields)
		return bytes.NewReader(b), "application/json", err
	}
	return nil, "", fmt.Errorf("profile %s accepts no encoding this client writes (%v)", p.Name, encodings)
}

// The wire types are the harness's own (package api), following docs/API.md.
type (
	Model    = api.Model
	Video    = api.Video
	Actual   = api.Actual
	Settings = api.Settings
	Timing   = api.Timing
)

// Polls is what WaitVideo did.
type Polls struct {
	N       int           // GET /v1/videos/{id} requests made
	Every   time.Duration // the cadence it was asked to keep
	Elapsed time.Duration // from the first poll's start to the last poll's end
}

// EditResult is the answer of POST /v1/images/edits.
type EditResult struct {
	ID             string
	Created        int64
	Model          string
	Size           string
	OutputFormat   string
	PNG            []byte // decoded from b64_json, or fetched from URL
	URL            string // set when the server answered with a url
	Actual         Actual
	Timing         Timing
	InferenceTimeS float64
	PeakMemoryMB   float64
	SHA256         string
	ExpiresAt      *int64
	Raw            map[string]any // the whole answer; numbers are json.Number
}

// Ready asks GET /ready and returns nil only for 200.
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodGet, "/ready", nil, "", "")
	return err
}

// Models lists GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	r, err := c.do(ctx, http.MethodGet, "/v1/models", nil, "", "")
	if err != nil {
		return nil, err
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := r.decode(&list, nil); err != nil {
		return nil, err
	}
	ms := make([]Model, len(list.Data))
	for i, raw := range list.Data {
		sub := *r
		sub.body = raw
		if err := sub.decode(&ms[i], &ms[i].Raw); err != nil {
			return nil, err
		}
	}
	return ms, nil
}

// CreateVideo posts the profile's create route (POST /v1/videos) as multipart/form-data, every
// value a text field (as AIPerf sends it), or as JSON where the profile takes only that, and
// sets X-Request-ID when requestID is non-empty.
func (c *Client) CreateVideo(ctx context.Context, fields map[string]string, requestID string) (Video, error) {
	method, route := c.route(func(p wire.Profile) string { return p.CreateVideo }, "")
	body, ct, err := c.createBody(fields)
	if err != nil {
		return Video{}, fmt.Errorf("%s %s: %w", method, route, err)
	}
	r, err := c.do(ctx, method, route, body, ct, requestID)
	if err != nil {
		return Video{}, err
	}
	var v Video
	err = r.decode(&v, &v.Raw)
	return v, err
}

// GetVideo asks the profile's poll route (GET /v1/videos/{id}). A non-2xx answer whose body is
// this job, failed, is the failed job, not an error: vLLM-Omni answers the poll of a failed
// job with the error's HTTP status and the job (api_server.retrieve_video); the wire
// assessment names that departure (failed-job-non-2xx).
func (c *Client) GetVideo(ctx context.Context, id string) (Video, error) {
	method, route := c.route(func(p wire.Profile) string { return p.PollVideo }, id)
	r, err := c.do(ctx, method, route, nil, "", "")
	var ae *APIError
	if errors.As(err, &ae) {
		if v, ok := failedJob(ae.RawBody, id); ok {
			return v, nil
		}
	}
	if err != nil {
		return Video{}, err
	}
	var v Video
	err = r.decode(&v, &v.Raw)
	return v, err
}

// failedJob reads body as job id, failed; its error.code may be the HTTP status as a number
// (vLLM-Omni's VideoError), which the contract's JobError carries as text.
func failedJob(body []byte, id string) (Video, bool) {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m["id"] != id || m["status"] != StatusFailed {
		return Video{}, false
	}
	if e, ok := m["error"].(map[string]any); ok {
		if n, ok := e["code"].(float64); ok {
			e["code"] = strconv.FormatFloat(n, 'f', -1, 64)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Video{}, false
	}
	var v Video
	r := &response{body: b}
	if r.decodeBody(&v, &v.Raw) != nil {
		return Video{}, false
	}
	return v, true
}

// ListVideos asks GET on the create route (GET /v1/videos) for the newest limit jobs.
func (c *Client) ListVideos(ctx context.Context, limit int) ([]Video, error) {
	_, route := c.route(func(p wire.Profile) string { return p.CreateVideo }, "")
	r, err := c.do(ctx, http.MethodGet, route+"?limit="+strconv.Itoa(limit), nil, "", "")
	if err != nil {
		return nil, err
	}
	var page api.VideoList
	return page.Data, r.decode(&page, nil)
}

// ListAllVideos asks GET on the create route for every job, page by page (the contract's
// limit, after and has_more), and returns them in the server's order.
func (c *Client) ListAllVideos(ctx context.Context) ([]Video, error) {
	_, route := c.route(func(p wire.Profile) string { return p.CreateVideo }, "")
	var all []Video
	after := ""
	for range maxPages {
		q := url.Values{"limit": {strconv.Itoa(pageSize)}}
		if after != "" {
			q.Set("after", after)
		}
		r, err := c.do(ctx, http.MethodGet, route+"?"+q.Encode(), nil, "", "")
		if err != nil {
			return all, err
		}
		var page api.VideoList
		if err := r.decode(&page, nil); err != nil {
			return all, err
		}
		all = append(all, page.Data...)
		if !page.HasMore {
			return all, nil
		}
		if page.LastID == "" || page.LastID == after {
			return all, r.errorf("has_more with no new last_id to page after (%q)", page.LastID)
		}
		after = page.LastID
	}
	return all, fmt.Errorf("GET %s: more than %d pages of %d jobs", route, maxPages, pageSize)
}

// pageSize is the contract's largest list page; maxPages bounds a list that never ends.
const (
	pageSize = 100
	maxPages = 1000
)

// WaitVideo polls GET /v1/videos/{id} every PollEvery (the first poll at once) until the job is
// completed or failed, and returns the last video object. A failed job is not an error: check
// Video.Status and Video.Error. A non-2xx poll, an unknown status and ctx ending are errors;
// Polls is filled in either way.
func (c *Client) WaitVideo(ctx context.Context, id string) (Video, Polls, error) {
	p := Polls{Every: c.PollEvery}
	if p.Every <= 0 {
		p.Every = DefaultPollEvery
	}
	start := time.Now()
	next := start
	last := "none"
	ended := func(v Video) (Video, Polls, error) {
		return v, p, fmt.Errorf("waiting for %s: last status %q after %d polls in %v: %w",
			id, last, p.N, time.Since(start).Round(time.Millisecond), ctx.Err())
	}
	for {
		v, err := c.GetVideo(ctx, id)
		p.N++
		p.Elapsed = time.Since(start)
		if err != nil {
			if ctx.Err() != nil {
				return ended(v)
			}
			return v, p, fmt.Errorf("waiting for %s (poll %d after %v): %w", id, p.N, p.Elapsed.Round(time.Millisecond), err)
		}
		last = v.Status
		switch v.Status {
		case StatusCompleted, StatusFailed:
			return v, p, nil
		case StatusQueued, StatusInProgress:
		default:
			return v, p, fmt.Errorf("GET /v1/videos/%s: unknown status %q (poll %d)", id, v.Status, p.N)
		}
		// Keep the cadence: the next poll is due Every after the previous one was due, not after
		// it returned; a poll slower than Every is followed at once.
		next = next.Add(p.Every)
		if now := time.Now(); next.Before(now) {
			next = now
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return ended(v)
		case <-t.C:
		}
	}
}

// Content downloads the profile's content route (GET /v1/videos/{id}/content) and returns the
// bytes and their Content-Type.
func (c *Client) Content(ctx context.Context, id string) ([]byte, string, error) {
	method, route := c.route(func(p wire.Profile) string { return p.VideoContent }, id)
	r, err := c.do(ctx, method, route, nil, "", "")
	if err != nil {
		return nil, "", err
	}
	return r.body, r.resp.Header.Get("Content-Type"), nil
}

// DeleteVideo asks the profile's delete route (DELETE /v1/videos/{id}) and checks the answer
// says deleted: the contract's {id, object: "video.deleted", deleted: true}, or, for a profile
// whose server answers with the job (Profile.Deleted, SGLang's delete_video), the job at that
// status. Whether the job is gone is the caller's to check (a GET answering 404).
func (c *Client) DeleteVideo(ctx context.Context, id string) error {
	method, route := c.route(func(p wire.Profile) string { return p.DeleteVideo }, id)
	status := c.profile().Deleted
	if status == "" {
		return c.deleteObject(ctx, method, route, id)
	}
	r, err := c.do(ctx, method, route, nil, "", "")
	if err != nil {
		return err
	}
	var v Video
	if err := r.decode(&v, nil); err != nil {
		return err
	}
	if v.ID != id || v.Status != status {
		return r.errorf("answer %s is not job %s at status %q", snippet(r.body), id, status)
	}
	return nil
}

// DeleteImage asks DELETE /v1/images/{id} (an edit answered with a url) and checks the answer
// says deleted.
func (c *Client) DeleteImage(ctx context.Context, id string) error {
	return c.deleteObject(ctx, http.MethodDelete, "/v1/images/"+url.PathEscape(id), id)
}

func (c *Client) deleteObject(ctx context.Context, method, route, id string) error {
	r, err := c.do(ctx, method, route, nil, "", "")
	if err != nil {
		return err
	}
	var d api.Deleted
	if err := r.decode(&d, nil); err != nil {
		return err
	}
	if !d.Deleted || d.ID != id {
		return r.errorf("answer %s does not say %s was deleted", snippet(r.body), id)
	}
	return nil
}

// Edit posts the profile's edit route (POST /v1/images/edits) as multipart/form-data: fields as
// text fields and image as the file part "image" named filename (its Content-Type sniffed from
// the bytes). It sets X-Request-ID when requestID is non-empty. The PNG comes from b64_json or, for
// response_format=url, is fetched from the url (with the same credentials).
func (c *Client) Edit(ctx context.Context, fields map[string]string, image []byte, filename, requestID string) (EditResult, error) {
	method, route := c.route(func(p wire.Profile) string { return p.EditImage }, "")
	if filename == "" {
		filename = "image"
	}
	body, ct, err := multipartBody(fields, &filePart{field: "image", name: filename, data: image})
	if err != nil {
		return EditResult{}, fmt.Errorf("%s %s: %w", method, route, err)
	}
	r, err := c.do(ctx, method, route, body, ct, requestID)
	if err != nil {
		return EditResult{}, err
	}
	var w api.Edit
	res := EditResult{}
	if err := r.decode(&w, &res.Raw); err != nil {
		return res, err
	}
	res.ID, res.Created, res.Model, res.Size, res.OutputFormat = w.ID, w.Created, w.Model, w.Size, w.OutputFormat
	res.Actual, res.Timing, res.InferenceTimeS, res.PeakMemoryMB = w.Actual, w.Timing, w.InferenceTimeS, w.PeakMemoryMB
	res.SHA256, res.ExpiresAt = w.SHA256, w.ExpiresAt
	if len(w.Data) != 1 {
		return res, r.errorf("want exactly one item in data, got %d", len(w.Data))
	}
	switch d := w.Data[0]; {
	case d.B64JSON != nil && *d.B64JSON != "":
		if res.PNG, err = base64.StdEncoding.DecodeString(*d.B64JSON); err != nil {
			return res, r.errorf("data[0].b64_json: %v", err)
		}
	case d.URL != nil && *d.URL != "":
		res.URL = *d.URL
		if res.PNG, err = c.fetch(ctx, res.URL); err != nil {
			return res, err
		}
	default:
		return res, r.errorf("data[0] has neither b64_json nor url")
	}
	return res, nil
}

// fetch GETs an artifact URL the server gave (absolute, or relative to BaseURL).
func (c *Client) fetch(ctx context.Context, u string) ([]byte, error) {
	ref, err := url.Parse(u)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if !ref.IsAbs() {
		base, err := url.Parse(c.base())
		if err != nil {
			return nil, fmt.Errorf("GET %s: base URL: %w", u, err)
		}
		ref = base.ResolveReference(ref)
	}
	r, err := c.doURL(ctx, http.MethodGet, ref.String(), ref.Path, nil, "", "")
	if err != nil {
		return nil, err
	}
	return r.body, nil
}

// response is a 2xx answer, read whole.
type response struct {
	method, route string
	resp          *http.Response
	body          []byte
}

// errorf is an error about a 2xx answer that does not keep the contract.
func (r *response) errorf(format string, args ...any) error {
	return fmt.Errorf("%s %s: HTTP %d: %s%s", r.method, r.route, r.resp.StatusCode, fmt.Sprintf(format, args...), reqIDSuffix(r.resp))
}

// decode unmarshals the body into v and, when raw is non-nil, into *raw (numbers as
// json.Number). A body that is not JSON is an error quoting it.
func (r *response) decode(v any, raw *map[string]any) error {
	if err := json.Unmarshal(r.body, v); err != nil {
		return r.errorf("decoding JSON (Content-Type %q): %v; body %s", r.resp.Header.Get("Content-Type"), err, snippet(r.body))
	}
	if err := r.decodeBody(nil, raw); err != nil {
		return r.errorf("decoding JSON: %v; body %s", err, snippet(r.body))
	}
	return nil
}

// decodeBody unmarshals the body into v (when non-nil) and *raw (when non-nil, numbers as
// json.Number).
func (r *response) decodeBody(v any, raw *map[string]any) error {
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			return err
		}
	}
	if raw != nil {
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.UseNumber()
		return dec.Decode(raw)
	}
	return nil
}

// DefaultTimeout bounds each exchange of a Client without its own HTTP client: no request
// to a server under test waits for ever.
const DefaultTimeout = 30 * time.Minute

var defaultHTTP = &http.Client{Timeout: DefaultTimeout}

func (c *Client) base() string { return strings.TrimRight(c.BaseURL, "/") }

func (c *Client) do(ctx context.Context, method, route string, body io.Reader, contentType, requestID string) (*response, error) {
	return c.doURL(ctx, method, c.base()+route, route, body, contentType, requestID)
}

// doURL sends one request and reads the answer whole; a non-2xx answer is an *APIError.
func (c *Client) doURL(ctx context.Context, method, u, route string, body io.Reader, contentType, requestID string) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, route, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if requestID != "" {
		req.Header.Set("X-Request-ID", requestID)
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, route, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: HTTP %d: reading the body: %w%s", method, route, resp.StatusCode, err, reqIDSuffix(resp))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, apiError(method, route, resp, b)
	}
	return &response{method: method, route: route, resp: resp, body: b}, nil
}
