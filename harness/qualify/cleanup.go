package qualify

import (
	"errors"
	"fmt"
	"os"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/client"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// cleanup is the stage "cleanup": every job of the run deleted, each answering 404 after; a
// launched mediaserve also leaves no artifact file and exits cleanly. An endpoint is not
// stopped: it was running before the suite and keeps running.
func (c *caseRun) cleanup(s *serving, a artifactSet) (string, error) {
	if s == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	var ids []string
	for _, r := range a.Run.Requests {
		if c.Entry.Workload == spec.TextToVideo && r.JobID != "" {
			ids = append(ids, r.JobID)
		}
	}
	for _, id := range ids {
		if err := c.deleteVideo(s, id); err != nil {
			return "", check.Fail("delete", "%w", err)
		}
		_, err := s.API.GetVideo(c.ctx, id)
		if err := check.GoneAfterDelete(id, err); err != nil {
			return "", err
		}
	}
	if s.External {
		return fmt.Sprintf("%d jobs deleted, each answering 404 after; the endpoint keeps running (not launched by the suite)", len(ids)), nil
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
	return fmt.Sprintf("%d jobs deleted; no artifact left; clean exit", len(ids)), nil
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
// a delete answered in another shape is a finding, not a failure.
func (c *caseRun) deleteVideo(s *serving, id string) error {
	if !s.External {
		return s.API.DeleteVideo(c.ctx, id)
	}
	method, path := s.Profile.Path(s.Profile.DeleteVideo, id)
	step, err := s.exchange(c.ctx, "delete", method, path, nil)
	if err != nil {
		return err
	}
	c.steps = append(c.steps, step)
	if st := step.Response.Status; st < 200 || st > 299 {
		return fmt.Errorf("%s %s answered HTTP %d", method, path, st)
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
