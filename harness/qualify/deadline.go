package qualify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

// Deadlines. Every request to the server under test has one and so does the whole case, so a
// hung server or endpoint fails its row by name (check "deadline") instead of blocking until
// `go test -timeout` panics and takes every row's report with it.
const (
	// DeadlineFactor is how many Task budgets one request may take: its Task, the one ahead of
	// it, and the encode and transfer around them.
	DeadlineFactor = 3
	// CPUTaskBudget is the stated budget of one Task at the pinned settings of a row without a
	// GPU (the reference families take under 0.1 s on the development machine).
	CPUTaskBudget = 20 * time.Second
	// GPUTaskBudget is that of a GPU row: the slowest published Task at pinned settings takes
	// minutes, not ten.
	GPUTaskBudget = 10 * time.Minute
	// caseMargin is what a case spends outside its requests and loads: starting AIPerf,
	// decoding and comparing artifacts, writing pictures.
	caseMargin = 5 * time.Minute
)

// TaskBudget is the stated budget of one of e's Tasks at its pinned settings.
func TaskBudget(e spec.Entry) time.Duration {
	if e.GPU != nil {
		return GPUTaskBudget
	}
	return CPUTaskBudget
}

// RequestDeadline is the deadline of each request of the case, and where it came from:
// MEDIAQUAL_REQUEST_TIMEOUT, else DeadlineFactor Task budgets for each request that may be
// in flight at once (AIPerf's concurrency).
func RequestDeadline(e spec.Entry, cfg Config) (time.Duration, string) {
	if cfg.RequestTimeout > 0 {
		return cfg.RequestTimeout, EnvRequestTimeout
	}
	n := time.Duration(max(1, cfg.Concurrency))
	return DeadlineFactor * TaskBudget(e) * n, fmt.Sprintf("%d x the row's %s Task budget x concurrency %d; %s overrides", DeadlineFactor, TaskBudget(e), n, EnvRequestTimeout)
}

// CaseDeadline is the deadline of the whole case, and where it came from: MEDIAQUAL_CASE_TIMEOUT,
// else two loads (the native path's and the server's, each its load timeout and a minute),
// a request deadline for every request the case makes (native and served inputs, warmup, the
// probes), and a margin.
func CaseDeadline(e spec.Entry, cfg Config, inputs int) (time.Duration, string) {
	if cfg.CaseTimeout > 0 {
		return cfg.CaseTimeout, EnvCaseTimeout
	}
	load, _, err := bundle.LoadTimeout(e)
	if err != nil {
		load = 10 * time.Minute
	}
	req, _ := RequestDeadline(e, cfg)
	warmup, measured := cfg.plan(inputs)
	// + the shape probe at two seeds, two influence probes and the concurrency probe's
	// requests, each waiting for the others on a server that runs one at a time; the refusals
	// run no Task.
	requests := time.Duration(inputs + warmup + measured + 4 + ConcurrencyN(e, cfg, 0))
	return 2*(load+time.Minute) + requests*req + caseMargin, fmt.Sprintf("two loads, %d requests at the request deadline and %s; %s overrides", requests, caseMargin, EnvCaseTimeout)
}

func (c *caseRun) requestDeadline() time.Duration {
	d, _ := RequestDeadline(c.Entry, c.Config)
	return d
}

// errCaseDeadline is the cause of a case context that ran out.
var errCaseDeadline = errors.New("the case deadline passed")

// httpClient is the client for every exchange with the server under test: none without a
// timeout, and each recorded in the row's history.
func (c *caseRun) httpClient() *http.Client {
	return &http.Client{Timeout: c.requestDeadline(), Transport: c.history.Transport(nil)}
}

// deadline names a stage's error check "deadline" when it is a request's or the case's
// deadline passing, saying which deadline and where it came from.
func (c *caseRun) deadline(stage string, err error) error {
	if err == nil {
		return nil
	}
	if why := c.interrupted(); why != nil {
		return fmt.Errorf("interrupted: %s stopped when the run was interrupted (%v): %w", stage, why, err)
	}
	var f *check.Failure
	if errors.As(err, &f) && f.Check == "deadline" {
		return err
	}
	if c.ctx != nil && c.ctx.Err() != nil {
		d, from := CaseDeadline(c.Entry, c.Config, len(c.inputs))
		return check.Fail("deadline", "%s: the case deadline (%s: %s) passed: %v", stage, d, from, err)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		d, from := RequestDeadline(c.Entry, c.Config)
		return check.Fail("deadline", "%s: a request's deadline (%s: %s) passed: %v", stage, d, from, err)
	}
	return err
}
