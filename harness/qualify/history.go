package qualify

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mediaqual/mediaqual/harness/aiperf"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/jobmodel"
	"github.com/mediaqual/mediaqual/harness/wire"
	"github.com/mediaqual/mediaqual/models/spec"
)

// holdHistory is the stage "history": every exchange the row made with the server (each
// recorded by the case's HTTP client, and AIPerf's records where its export has them), held to
// the job API's model (harness/jobmodel). Each broken rule fails its own check, naming the
// exchanges that break it; a rule the server cannot be held to (no list route, no timestamps)
// is a named limit. The history is kept as history.jsonl in the case's directory.
func (c *caseRun) holdHistory(s *serving) (string, error) {
	if s == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	ops := c.history.Ops()
	if err := writeHistory(filepath.Join(c.Dir, "history.jsonl"), ops); err != nil {
		return "", err
	}
	r := jobmodel.Check(ops, jobmodel.Options{Exclusive: !s.External, Videos: c.Entry.Workload == spec.TextToVideo})
	for _, why := range r.Unheld {
		c.limit(spec.FamilyValidated, "job API rule "+why)
	}
	var failed []error
	for _, v := range r.Violations {
		if d, ok := s.Profile.Departs[v.Check]; ok && s.External {
			// The peer's released code breaks this rule: its finding, named with the source.
			c.findings = append(c.findings, wire.Finding{Name: v.Check, Detail: fmt.Sprintf("%s (%s: %s: %q)", v.Detail, s.Profile.Name, d.Why, d.Source)})
			continue
		}
		failed = append(failed, check.Fail(v.Check, "%s", v.Error()))
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	aiperfOps := 0
	for _, o := range ops {
		if o.By == "aiperf" {
			aiperfOps++
		}
	}
	msg := fmt.Sprintf("%d exchanges (%d from AIPerf's records) held to the job API's model: %s kept", len(ops), aiperfOps, strings.Join(r.Held, ", "))
	if len(r.Unheld) > 0 {
		msg += fmt.Sprintf("; %d not held (limits)", len(r.Unheld))
	}
	return msg, nil
}

// listJobs lists every job the server holds, for the model's listing rule (a video row; an
// edit makes no job). Its answer is the history's: a server without a list route is named
// there, so an error here is not the stage's.
func (c *caseRun) listJobs(s *serving) {
	if s != nil && c.Entry.Workload == spec.TextToVideo {
		_, _ = s.API.ListAllVideos(c.ctx)
	}
}

// recordAIPerf adds AIPerf's own records to the history: each request's create (or edit) with
// the answer it got and, for a video, the last poll it kept. They carry no time on the suite's
// clock, so the model orders them with nothing; they still hold identity, fields and listing.
func (c *caseRun) recordAIPerf(x aiperf.Exports) {
	p := c.Config.Target.Profile
	kind, route := jobmodel.Edit, p.EditImage
	if c.Entry.Workload == spec.TextToVideo {
		kind, route = jobmodel.Create, p.CreateVideo
	}
	method, path := p.Path(route, "")
	for _, raw := range x.Raw {
		if len(raw.Responses) == 0 {
			continue
		}
		fields := map[string]string{}
		for k, v := range raw.Payload {
			if s, ok := v.(string); ok {
				fields[k] = s
			} else if b, err := json.Marshal(v); err == nil {
				fields[k] = string(b)
			}
		}
		// A video's first answer is the create's, whatever became of the job; an edit that
		// failed carries AIPerf's error instead of an image.
		status := 200
		if raw.Error != nil && (kind == jobmodel.Edit || raw.JobID() == "") {
			status = raw.Error.Code
		}
		op := jobmodel.Op{Kind: kind, By: "aiperf", Method: method, Path: path, RequestID: raw.Meta.XRequestID, Fields: fields, Status: status}
		c.history.AddAnswer(op, []byte(raw.Responses[0].Text))
		if kind == jobmodel.Create && len(raw.Responses) > 1 && raw.JobID() != "" {
			last := raw.Responses[len(raw.Responses)-1]
			method, path := p.Path(p.PollVideo, raw.JobID())
			poll := jobmodel.Op{Kind: jobmodel.Poll, By: "aiperf", Method: method, Path: path, Job: raw.JobID(), Status: 200}
			c.history.AddAnswer(poll, []byte(last.Text))
		}
	}
}

func writeHistory(path string, ops []jobmodel.Op) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, o := range ops {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
