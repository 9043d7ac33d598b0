package qualify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// cleanup is the stage "cleanup": every job the suite created deleted, whatever failed
// before (a hung job, a failed aiperf stage), each job and its content answering 404 after; a
// launched mediaserve also leaves no artifact file and exits cleanly. An endpoint is not
// stopped: it was running before the suite and keeps running.
func (c *caseRun) cleanup(s *serving, a artifactSet) (string, error) {
	if s == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	var failed []error // every job is deleted; each failure is listed
	del := func(ids []string) {
		for _, id := range ids {
			if err := c.deleteVideo(s, id); err != nil {
				failed = append(failed, check.Fail("delete", "%w", err))
				continue
			}
			_, err := s.API.GetVideo(c.ctx, id)
			if err := check.GoneAfterDelete("job "+id, err); err != nil {
				failed = append(failed, err)
			}
			_, _, err = s.API.Content(c.ctx, id)
			if err := check.GoneAfterDelete("the content of "+id, err); err != nil {
				failed = append(failed, err)
			}
		}
	}
	ids := c.jobs
	del(ids)
	if c.Entry.Workload == spec.TextToVideo {
		// The list after the suite's deletes is the model's "after" (job-orphans). On a launched
		// mediaserve every job is the suite's to delete, those no stage got to name (AIPerf
		// aborted before its exports, for one) and any orphan too; the history names an orphan.
		listed, err := s.API.ListAllVideos(c.ctx)
		if err != nil && !s.External {
			return "", check.Fail("delete", "listing the server's jobs to delete them: %w", err)
		}
		var more []string
		for _, v := range listed {
			if !s.External && !slices.Contains(ids, v.ID) {
				more = append(more, v.ID)
			}
		}
		del(more)
		ids = append(ids, more...)
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	if s.External {
		return fmt.Sprintf("%d jobs deleted, each and its content answering 404 after; the endpoint keeps running (not launched by the suite)", len(ids)), nil
	}
	if left, err := listDir(s.artifactDir); err != nil || len(left) > 0 {
		return "", check.Fail("no-leftover-files", "%v %v", left, err)
	}
	if err := s.srv.Stop(); err != nil {
		return "", check.Fail("clean-exit", "%w\n%s", err, s.srv.LogTail(20))
	}
	if left, err := listDir(s.artifactDir); err != nil || len(left) > 0 {
		return "", check.Fail("no-leftover-files", "after shutdown: %v %v", left, err)
	}
	return fmt.Sprintf("%d jobs deleted, each and its content answering 404 after; no artifact left; clean exit", len(ids)), nil
}

// createdJobs records video jobs the server created for the suite's requests, for cleanup to
// delete whatever fails before it.
func (c *caseRun) createdJobs(ids ...string) {
	if c.Entry.Workload != spec.TextToVideo {
		return // an edit is answered whole; nothing stays to delete
	}
	for _, id := range ids {
		c.jobs = addJob(c.jobs, id)
	}
}

func addJob(ids []string, id string) []string {
	if id == "" || slices.Contains(ids, id) {
		return ids
	}
	return append(ids, id)
}

func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

// deleteVideo deletes a job. An endpoint's answer is kept for the contract's assessment, so
// a delete answered in another shape is a finding, not a failure. A 409 is a cancellation still
// in progress (vLLM-Omni 0.30+ answers so): the delete is asked again until it is answered or
// a request's deadline has passed.
func (c *caseRun) deleteVideo(s *serving, id string) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.requestDeadline())
	defer cancel()
	for {
		err := c.deleteOnce(ctx, s, id)
		if statusOf(err) != http.StatusConflict {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (asked again until %v passed)", err, c.requestDeadline())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *caseRun) deleteOnce(ctx context.Context, s *serving, id string) error {
	if !s.External {
		return s.API.DeleteVideo(ctx, id)
	}
	method, path := s.Profile.Path(s.Profile.DeleteVideo, id)
	step, err := s.exchange(ctx, "delete", method, path, nil)
	if err != nil {
		return err
	}
	c.steps = append(c.steps, step)
	if st := step.Response.Status; st < 200 || st > 299 {
		return &client.APIError{Method: method, Route: path, Status: st, RawBody: step.Response.Body}
	}
	return nil
}

func wireStep(step, method, path string) (st wire.Step) {
	st.Step = step
	st.Request.Method, st.Request.Path = method, path
	return st
}

// statusOf is the HTTP status of a client error, 0 when the server did not answer.
func statusOf(err error) int {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status
	}
	return 0
}
