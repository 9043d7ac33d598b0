package qualify

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/launch"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
	"github.com/mediaqual/mediaqual/reports"
)

// pollEvery is the suite's stated polling cadence for video jobs.
const pollEvery = 100 * time.Millisecond

// serving is the server the serve stage made ready: mediaserve it launched, or an endpoint
// that was already running.
type serving struct {
	URL      string
	API      *client.Client
	Profile  wire.Profile
	External bool // not launched here: not stopped here, its files and ledger are its own

	srv         *launch.Server
	artifactDir string // a launched mediaserve's; "" for an endpoint
	ledgerPath  string // a launched mediaserve's; "" for an endpoint
	lanes       int    // the Tasks the server declares it runs at once; 0 where it does not say
}

// serve is the stage "serve": mediaserve launched for this row and ready (load is not timed),
// or the configured endpoint answering; either way /v1/models reconciles with the inventory.
func (c *caseRun) serve() (*serving, string, error) {
	var s *serving
	var how string
	var err error
	if c.Config.Target.External() {
		s, how, err = c.endpoint()
	} else {
		s, how, err = c.launch()
	}
	if err != nil {
		return nil, "", err
	}
	c.Row.Endpoint = s.URL
	if c.Row.Versions == nil {
		c.Row.Versions = map[string]string{}
	}
	for k, v := range c.versions(s) {
		c.Row.Versions[k] = v
	}
	served, err := s.API.Models(c.ctx)
	if err != nil {
		return nil, "", check.Fail("reconcile", "%w", err)
	}
	lookup := c.Config.Lookup
	if lookup == nil {
		lookup = func(id string) (spec.Entry, error) {
			if id == c.Entry.ID {
				return c.Entry, nil
			}
			return spec.Entry{}, fmt.Errorf("%s is not in the inventory", id)
		}
	}
	served, lookup = c.declared(s, served, lookup)
	if err := check.Reconcile(served, lookup, c.Entry); err != nil {
		return nil, "", err
	}
	runtime := parityServed{Branches: c.Entry.Defaults.Guidance > 1}
	for _, m := range served {
		if m.ID == c.Entry.ID {
			if !s.External {
				c.Row.Mode = "mediaserve launched by the suite, " + m.Runtime + " Task runtime"
			}
			c.Row.Layout, s.lanes = layout(m), m.Lanes
			runtime.Layout = m.Layout
			if m.Parity != nil {
				p := spec.Parity(*m.Parity)
				c.Row.Parity = &p
			}
		}
	}
	if c.Entry.Engine != "" && !s.External {
		c.Row.Engine = cmp.Or(c.Config.Engine, c.Entry.Engine)
	}
	runtime.Engine = c.Row.Engine
	if c.Entry.Engine != "" && s.External {
		runtime.Engine = "unknown (the endpoint does not say)"
	}
	if err := c.parity(s, runtime); err != nil {
		return nil, "", err
	}
	refused, err := c.refusals(s)
	if err != nil {
		return nil, "", err
	}
	d, from := RequestDeadline(c.Entry, c.Config)
	return s, fmt.Sprintf("%s; /v1/models reconciles with the inventory%s; request deadline %s (%s)", how, refused, d, from), nil
}

// declared is what an endpoint's /v1/models says, read through its wire profile, and the
// inventory as far as it can be held to that: a declaration field the server's model list never
// says (SGLang's has no revision or profile; vLLM's model card none of the four) is left out of
// the reconciliation on both sides and named as a limit on the row, never a failed serve stage.
// Where the list says no capability, the row's own stand in, and only serving the workload (the
// aiperf stage) shows it.
func (c *caseRun) declared(s *serving, served []api.Model, lookup func(string) (spec.Entry, error)) ([]api.Model, func(string) (spec.Entry, error)) {
	if !s.External {
		return served, lookup
	}
	var unsaid []string
	out := make([]api.Model, len(served))
	for i, m := range served {
		card, missing := s.Profile.ParseModel(m.Raw)
		m.ID, m.Capabilities, m.Revision, m.Precision, m.Profile = card.ID, card.Capabilities, card.Revision, card.Precision, card.Profile
		if slices.Contains(missing, "capabilities") {
			if e, err := lookup(m.ID); err == nil {
				for _, x := range e.Capabilities {
					m.Capabilities = append(m.Capabilities, string(x))
				}
			}
		}
		out[i] = m
		for _, f := range missing {
			if !slices.Contains(unsaid, f) {
				unsaid = append(unsaid, f)
			}
		}
	}
	if len(unsaid) == 0 {
		return out, lookup
	}
	c.limit(spec.Implemented, fmt.Sprintf("the endpoint's /v1/models (%s) does not say the model's %s: not reconciled with the inventory", s.Profile.Name, strings.Join(unsaid, ", ")))
	return out, func(id string) (spec.Entry, error) {
		e, err := lookup(id)
		for _, f := range unsaid {
			switch f {
			case "revision":
				e.Revision = ""
			case "precision":
				e.Precision = ""
			case "profile":
				e.Profile = ""
			}
		}
		return e, err
	}
}

// pollHold is the launched mediaserve's long poll (its -poll-hold, stated in every run): a poll
// of an unfinished video is answered when the job changes, so the end is seen when it happens.
const pollHold = time.Second

// launch starts mediaserve for this row and waits for readiness.
func (c *caseRun) launch() (*serving, string, error) {
	s := &serving{Profile: wire.Mediaserve, artifactDir: filepath.Join(c.Dir, "artifacts"), ledgerPath: filepath.Join(c.Dir, "ledger.jsonl")}
	layout, err := c.layout()
	if err != nil {
		return nil, "", check.Fail("launch", "%w", err)
	}
	cfg := launch.Config{
		Binary: c.Config.Mediaserve, URLFromStdout: true, Dir: c.Dir, GPUs: c.Config.GPUs, Env: []string{c.rootEnv()},
		Args: []string{"-port", "0", "-model", c.Entry.ID, "-artifact-dir", s.artifactDir, "-ledger", s.ledgerPath,
			"-engine", c.Config.Engine, "-layout", string(layout), "-poll-hold", pollHold.String()},
	}
	c.pollHold = pollHold
	timeout, from, err := bundle.LoadTimeout(c.Entry)
	if err != nil {
		return nil, "", check.Fail("launch", "%w", err)
	}
	// The worker's own load timeout ends first and names the row; readiness waits a minute more
	// for the process around it.
	cfg.Args = append(cfg.Args, "-load-timeout", timeout.String())
	cfg.ReadyTimeout = timeout + time.Minute
	if f := c.Config.Fault; f != "" {
		// The fault self-test serves a deliberately broken server; the row says so, and the
		// stages must catch it.
		cfg.Args = append(cfg.Args, "-fault", f)
		c.Row.Note = "FAULT INJECTED (" + f + "): not a qualification; " + c.Row.Note
	}
	start := time.Now()
	srv, err := launch.Launch(cfg)
	if errors.Is(err, launch.ErrNotReady) { // not for a server that exited saying why
		err = fmt.Errorf("%w\n%s", err, bundle.RaiseHint(timeout, from))
	}
	if err != nil {
		if srv != nil { // started but not ready: Launch leaves stopping it to its caller
			_ = srv.Stop()
		}
		return nil, "", launchFailure(err)
	}
	c.Row.Load = &reports.Load{ReadyS: time.Since(start).Seconds(), TimeoutS: timeout.Seconds(), From: from}
	c.T.Cleanup(func() { _ = srv.Stop() })
	s.srv, s.URL = srv, srv.URL
	s.API = &client.Client{BaseURL: srv.URL, PollEvery: pollEvery, HTTP: c.httpClient(), Profile: s.Profile}
	return s, fmt.Sprintf("ready at %s in %.1f s (load timeout %s, from %s)", srv.URL, c.Row.Load.ReadyS, timeout, from), nil
}

// endpoint takes the configured endpoint as it is: nothing is launched, and a refused
// request shows its error shape.
func (c *caseRun) endpoint() (*serving, string, error) {
	t := c.Config.Target
	p := t.Profile
	url := strings.TrimRight(t.Endpoint, "/")
	s := &serving{URL: url, Profile: p, External: true, API: &client.Client{BaseURL: url, APIKey: t.APIKey, PollEvery: pollEvery, HTTP: c.httpClient(), Profile: p}}
	c.Row.Mode = "external endpoint (" + p.Name + " wire profile), not launched by the suite"
	if c.Config.Fault != "" {
		return nil, "", check.Fail("launch", "%s=%s needs a launched mediaserve, not an endpoint", EnvFault, c.Config.Fault)
	}
	// A request no server can accept: no model, no prompt. Its answer shows the error shape.
	method, path := errorProbeRoute(p, c.Entry.Workload)
	step, err := s.exchange(c.ctx, "error", method, path, map[string]string{"mediaqual_probe": "1"})
	if err != nil {
		return nil, "", check.Fail("endpoint", "%w", err)
	}
	if step.Response.Status < 400 {
		c.findings = append(c.findings, wire.Finding{Name: "invalid-request-accepted",
			Detail: fmt.Sprintf("%s %s without model or prompt answered HTTP %d", method, path, step.Response.Status)})
	} else {
		c.steps = append(c.steps, step)
	}
	return s, "external endpoint " + url + " answers (not launched by the suite)", nil
}

// errorProbeRoute is where the error-shape probe goes: the row's own route, since an edit
// row's server may serve no video route.
func errorProbeRoute(p wire.Profile, w spec.Capability) (method, path string) {
	if w == spec.ImageEdit {
		return p.Path(p.EditImage, "")
	}
	return p.Path(p.CreateVideo, "")
}

// exchange sends one request (a JSON body of fields, or none) and keeps it as a wire.Step,
// so the server's departures from the contract can be assessed.
func (s *serving) exchange(ctx context.Context, step, method, path string, fields map[string]string) (wire.Step, error) {
	var st wire.Step
	st.Step = step
	st.Request.Method, st.Request.Path, st.Request.Fields = method, path, fields
	var body io.Reader
	if fields != nil {
		b, _ := json.Marshal(fields)
		body = bytes.NewReader(b)
		st.Request.ContentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		return st, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.API.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.API.APIKey)
	}
	echo, _ := ctx.Value(requestIDKey{}).(*requestIDEcho)
	if echo != nil {
		req.Header.Set("X-Request-ID", echo.sent)
	}
	resp, err := s.API.HTTP.Do(req) // the case's client: never one without a timeout
	if err != nil {
		return st, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if echo != nil {
		echo.got = resp.Header.Get("X-Request-ID")
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, fmt.Errorf("%s %s: %w", method, path, err)
	}
	st.Response.Status, st.Response.ContentType = resp.StatusCode, resp.Header.Get("Content-Type")
	if json.Valid(b) {
		st.Response.Body = b
	}
	return st, nil
}

// versions are the versions of what served the run.
func (c *caseRun) versions(s *serving) map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if out, err := toolOutput(c.ctx, "ffmpeg", "-version"); err == nil {
		v["ffmpeg"] = strings.TrimPrefix(strings.SplitN(out, " Copyright", 2)[0], "ffmpeg version ")
	}
	if b, err := os.ReadFile(c.Config.Mediaserve); err == nil && !s.External {
		v["mediaserve"] = digest(b)[:12]
	}
	return v
}

// layout says how the server declared it runs the model: the GPU layout it serves, its lanes
// and their devices, e.g. "cfg-2, 1 lane, CUDA devices 0,1".
func layout(m api.Model) string {
	if m.Lanes == 0 {
		return "" // a server that does not say
	}
	l := fmt.Sprintf("%d lane", m.Lanes)
	if m.Lanes > 1 {
		l += "s"
	}
	if m.Layout != "" {
		l = m.Layout + ", " + l
	}
	if len(m.LaneDevices) > 0 {
		l += ", CUDA devices " + strings.Join(m.LaneDevices, " | ")
	}
	return l
}
