package jobmodel

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/harness/api"
)

// DefaultClockSkew is how far a server's clock may be from the suite's before its timestamps
// are impossible; the contract's timestamps are whole seconds, which the checks allow besides.
const DefaultClockSkew = 2 * time.Second

// Options are what a check needs besides the history.
type Options struct {
	ClockSkew time.Duration // 0: DefaultClockSkew
	// Exclusive is a server that serves the suite alone (a launched mediaserve): every job it
	// lists is one the suite or AIPerf made. On a shared endpoint a listed job is the suite's
	// only when it carries one of the prompts the suite sent.
	Exclusive bool
	Videos    bool // the row makes video jobs: every rule applies, not only those for edits
}

// Result is a history held to the model.
type Result struct {
	Violations []Violation // each broken rule's first violation, in Rules' order
	Unheld     []string    // "<check>: why", for each rule the history cannot hold the server to
	Held       []string    // the checks of the rules the history held the server to
}

// Check holds ops to every rule of the model.
func Check(ops []Op, opt Options) Result {
	if opt.ClockSkew == 0 {
		opt.ClockSkew = DefaultClockSkew
	}
	v := newView(ops, opt)
	var r Result
	for _, rule := range Rules {
		if !opt.Videos && !rule.Edits {
			continue
		}
		viol, why := rule.hold(v)
		switch {
		case viol != nil:
			viol.Check = rule.Check
			r.Violations = append(r.Violations, *viol)
		case why != "":
			r.Unheld = append(r.Unheld, rule.Check+": "+why)
		default:
			r.Held = append(r.Held, rule.Check)
		}
	}
	return r
}

// view is a history indexed by job.
type view struct {
	ops     []Op
	opt     Options
	creates map[string]Op   // job -> the create answered with it
	byJob   map[string][]Op // job -> every exchange naming it, in the order sent
	deleted map[string]Op   // job -> the delete answered 2xx
}

func newView(ops []Op, opt Options) *view {
	v := &view{ops: ops, opt: opt, creates: map[string]Op{}, byJob: map[string][]Op{}, deleted: map[string]Op{}}
	for _, o := range ops {
		if o.Job == "" {
			continue
		}
		if o.Kind == Create && o.OK() {
			if _, dup := v.creates[o.Job]; !dup {
				v.creates[o.Job] = o
			}
		}
		if o.Kind == Delete && o.OK() {
			if _, seen := v.deleted[o.Job]; !seen {
				v.deleted[o.Job] = o
			}
		}
		v.byJob[o.Job] = append(v.byJob[o.Job], o)
	}
	return v
}

// jobs are the ids exchanges named, in the order first named.
func (v *view) jobs() []string {
	var ids []string
	for _, o := range v.ops {
		if o.Job != "" && !slices.Contains(ids, o.Job) {
			ids = append(ids, o.Job)
		}
	}
	return ids
}

// observations are the answers that carry the job's object as the server saw it then (not a
// delete's answer, which may say "deleted").
func (v *view) observations(id string) []Op {
	var obs []Op
	for _, o := range v.byJob[id] {
		if o.Object != nil && o.Object.ID == id && (o.Kind == Create || o.Kind == Poll) {
			obs = append(obs, o)
		}
	}
	return obs
}

// after reports whether b was sent after a's answer was received, on the suite's clock (an
// AIPerf record's exchange has no time on it and is ordered with nothing).
func after(a, b Op) bool {
	return !a.Received.IsZero() && !b.Sent.IsZero() && !b.Sent.Before(a.Received)
}

func violation(format string, ops []Op, args ...any) *Violation {
	return &Violation{Detail: fmt.Sprintf(format, args...), Ops: ops}
}

func holdIdentity(v *view) (*Violation, string) {
	seen := map[string]Op{}
	for _, o := range v.ops {
		asked := v.creates[o.Job].Fields["model"]
		switch {
		case o.Kind == Create && o.OK():
			if o.Object == nil {
				return violation("a create was answered %d without a job object", []Op{o}, o.Status), ""
			}
			if first, dup := seen[o.Job]; dup {
				return violation("two creates were answered with one job %s", []Op{first, o}, o.Job), ""
			}
			seen[o.Job] = o
			if m := o.Object.Model; m != "" && o.Fields["model"] != "" && m != o.Fields["model"] {
				return violation("the create asked model %q; its job names %q", []Op{o}, o.Fields["model"], m), ""
			}
		case (o.Kind == Poll || o.Kind == Delete) && o.Object != nil:
			if o.Object.ID != o.Job {
				return violation("asked for job %s, answered with job %s", v.with(o.Job, o), o.Job, o.Object.ID), ""
			}
			if m := o.Object.Model; m != "" && asked != "" && m != asked {
				return violation("job %s was created for model %q; this answer names %q", v.with(o.Job, o), o.Job, asked, m), ""
			}
			if r, sent := o.Object.RequestID, v.creates[o.Job].RequestID; r != "" && sent != "" && r != sent {
				return violation("job %s was created by request %s; this answer says request %s made it", v.with(o.Job, o), o.Job, sent, r), ""
			}
		case o.Kind == Edit && o.OK() && o.Object != nil:
			if m := o.Object.Model; m != "" && o.Fields["model"] != "" && m != o.Fields["model"] {
				return violation("the edit asked model %q; its answer names %q", []Op{o}, o.Fields["model"], m), ""
			}
		}
	}
	return nil, ""
}

// with is the job's create (when the history has it) and o.
func (v *view) with(job string, o ...Op) []Op {
	if c, ok := v.creates[job]; ok && c.N != o[0].N {
		return append([]Op{c}, o...)
	}
	return o
}

func holdStatus(v *view) (*Violation, string) {
	for _, id := range v.jobs() {
		obs := v.observations(id)
		for i, b := range obs {
			if _, ok := Transitions[b.Object.Status]; !ok {
				return violation("job %s has status %q, none of the model's", []Op{b}, id, b.Object.Status), ""
			}
			if p := b.Object.Progress; p != nil && (*p < 0 || *p > 100) {
				return violation("job %s reports progress %g, outside 0..100", []Op{b}, id, *p), ""
			}
			for _, a := range obs[:i] {
				if !after(a, b) {
					continue
				}
				if !slices.Contains(Transitions[a.Object.Status], b.Object.Status) {
					return violation("job %s went from %s back to %s", []Op{a, b}, id, a.Object.Status, b.Object.Status), ""
				}
				pa, pb := a.Object.Progress, b.Object.Progress
				if pa != nil && pb != nil && *pb < *pa && b.Object.Status != api.StatusFailed {
					return violation("job %s's progress went from %g back to %g", []Op{a, b}, id, *pa, *pb), ""
				}
			}
		}
	}
	return nil, ""
}

// unixCeil is t in whole seconds, rounded up.
func unixCeil(t time.Time) int64 {
	if t.Nanosecond() > 0 {
		return t.Unix() + 1
	}
	return t.Unix()
}

func holdTimestamps(v *view) (*Violation, string) {
	skew := v.opt.ClockSkew
	said := false
	for _, id := range v.jobs() {
		create, timed := v.creates[id]
		timed = timed && !create.Sent.IsZero()
		var created, completed *Op
		var lastUnfinished *Op
		for _, o := range v.observations(id) {
			obj := o.Object
			if obj.CreatedAt != nil {
				said = true
				if created == nil {
					created = &o
					if timed && (*obj.CreatedAt < create.Sent.Add(-skew).Unix() || *obj.CreatedAt > unixCeil(create.Received.Add(skew))) {
						return violation("job %s's created_at %d is not within its create's send and answer (%d..%d, %v skew allowed)",
							[]Op{create, o}, id, *obj.CreatedAt, create.Sent.Unix(), unixCeil(create.Received), skew), ""
					}
				} else if *obj.CreatedAt != *created.Object.CreatedAt {
					return violation("job %s's created_at changed from %d to %d", []Op{*created, o}, id, *created.Object.CreatedAt, *obj.CreatedAt), ""
				}
			}
			switch obj.Status {
			case api.StatusQueued, api.StatusInProgress:
				if !o.Sent.IsZero() {
					lastUnfinished = &o
				}
			case api.StatusCompleted:
				if obj.CompletedAt == nil {
					continue
				}
				if completed != nil {
					if *obj.CompletedAt != *completed.Object.CompletedAt {
						return violation("job %s's completed_at changed from %d to %d", []Op{*completed, o}, id, *completed.Object.CompletedAt, *obj.CompletedAt), ""
					}
					continue
				}
				completed = &o
				at := *obj.CompletedAt
				if created != nil && at < *created.Object.CreatedAt {
					return violation("job %s completed at %d, before it was created at %d", []Op{*created, o}, id, at, *created.Object.CreatedAt), ""
				}
				if !o.Received.IsZero() && at > unixCeil(o.Received.Add(skew)) {
					return violation("job %s's completed_at %d is after the answer saying so was received (%d, %v skew allowed)", []Op{o}, id, at, unixCeil(o.Received), skew), ""
				}
				if lastUnfinished != nil && at < lastUnfinished.Sent.Add(-skew).Unix() {
					return violation("job %s's completed_at %d is before it was last seen %s (asked at %d)", []Op{*lastUnfinished, o}, id, at, lastUnfinished.Object.Status, lastUnfinished.Sent.Unix()), ""
				}
				if e := obj.ExpiresAt; e != nil && *e < at {
					return violation("job %s expires at %d, before it completed at %d", []Op{o}, id, *e, at), ""
				}
			}
		}
	}
	if !said {
		return nil, "no job object carries created_at: its times cannot be held to the client's"
	}
	return nil, ""
}

func holdContent(v *view) (*Violation, string) {
	expires := false
	for _, id := range v.jobs() {
		obs := v.observations(id)
		del, deleted := v.deleted[id]
		var first *Op
		for _, o := range v.byJob[id] {
			if o.Object != nil && o.Object.ExpiresAt != nil {
				expires = true
			}
			if o.Kind != Content || (deleted && after(del, o)) {
				continue
			}
			var before, next *Op // the last observation answered before o was sent; the first sent after o's answer
			for _, b := range obs {
				if after(b, o) {
					before = &b
				}
				if next == nil && after(o, b) {
					next = &b
				}
			}
			switch {
			case o.OK():
				if next != nil && !next.Object.terminal() {
					return violation("job %s's content was answered %d while the job was still %s", []Op{o, *next}, id, o.Status, next.Object.Status), ""
				}
				if first == nil {
					first = &o
				} else if o.Digest != first.Digest {
					return violation("two fetches of job %s's content answered different bytes", []Op{*first, o}, id), ""
				}
			case before != nil && before.Object.Status == api.StatusCompleted:
				if e := before.Object.ExpiresAt; e == nil || o.Sent.Unix() < *e {
					return violation("job %s was completed (and not expired) but its content answered %d", []Op{*before, o}, id, o.Status), ""
				}
			case o.Status == 0 || o.Status >= 500:
				return violation("job %s's content before completion answered %d, not a 4xx", v.with(id, o), id, o.Status), ""
			}
		}
	}
	if !expires {
		return nil, "no job object carries expires_at: how long content must stay the same is not said (held until a delete)"
	}
	return nil, ""
}

func (o *Object) terminal() bool {
	return o.Status == api.StatusCompleted || o.Status == api.StatusFailed
}

func holdDeleted(v *view) (*Violation, string) {
	for _, o := range v.ops {
		for _, id := range o.names() {
			del, ok := v.deleted[id]
			if !ok || !after(del, o) {
				continue
			}
			switch {
			case o.Kind == List:
				return violation("job %s is listed after its delete was answered", []Op{del, o}, id), ""
			case (o.Kind == Poll || o.Kind == Content) && o.Status != 404:
				return violation("job %s's %s after its delete answered %d, not 404", []Op{del, o}, id, o.Kind, o.Status), ""
			}
		}
	}
	return nil, ""
}

// names are the jobs an exchange names: the one it asks about, or those a list answered.
func (o Op) names() []string {
	if o.Kind == List {
		ids := make([]string, len(o.Listed))
		for i, l := range o.Listed {
			ids[i] = l.ID
		}
		return ids
	}
	if o.Job == "" {
		return nil
	}
	return []string{o.Job}
}

// snapshot is one whole listing: its pages, from the first page's send to the last's answer.
type snapshot struct {
	pages []Op
	jobs  map[string]Object
}

// snapshots are the complete listings of the history (a listing whose last page says more
// follow is not one).
func (v *view) snapshots() (snaps []snapshot, why string) {
	var cur *snapshot
	for _, o := range v.ops {
		if o.Kind != List {
			continue
		}
		if !o.OK() {
			why = fmt.Sprintf("%s %s answered %d: the server lists no jobs", o.Method, o.Path, o.Status)
			cur = nil
			continue
		}
		if cur == nil || !strings.Contains(o.Path, "after=") {
			cur = &snapshot{jobs: map[string]Object{}} // a first page: a listing left unfinished is none
		}
		cur.pages = append(cur.pages, o)
		for _, l := range o.Listed {
			cur.jobs[l.ID] = l
		}
		if !o.HasMore {
			snaps = append(snaps, *cur)
			cur = nil
		}
	}
	return snaps, why
}

func holdListing(v *view) (*Violation, string) {
	snaps, why := v.snapshots()
	if len(snaps) < 2 {
		if why == "" {
			why = fmt.Sprintf("%d whole listings in the history, not one before and one after the run", len(snaps))
		}
		return nil, why
	}
	before, last := snaps[0], snaps[len(snaps)-1]
	start, end := before.pages[len(before.pages)-1], last.pages[0]
	prompts := map[string]bool{}
	expected := map[string]Op{}
	for id := range before.jobs {
		expected[id] = before.pages[0]
	}
	for _, o := range v.ops {
		if o.Kind == Create && o.Fields["prompt"] != "" {
			prompts[o.Fields["prompt"]] = true
		}
		between := o.Sent.IsZero() || (after(start, o) && !o.Received.After(end.Sent))
		switch {
		case !between:
		case o.Kind == Create && o.OK() && o.Job != "":
			expected[o.Job] = o
		case o.Kind == Delete && o.OK():
			delete(expected, o.Job)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(last.jobs)) {
		got := last.jobs[id]
		if _, ok := expected[id]; ok {
			continue
		}
		if d, ok := v.deleted[id]; ok && !d.Received.After(end.Sent) {
			continue // deleted, yet listed: job-deleted's
		}
		if v.opt.Exclusive || prompts[got.Prompt] {
			return violation("job %s (%s) is listed after the run, but neither listed before it nor created by the suite or AIPerf: an orphan", append(last.pages[:1:1], start), id, got.Status), ""
		}
	}
	for _, id := range slices.Sorted(maps.Keys(expected)) {
		if _, ok := last.jobs[id]; ok {
			continue
		}
		o := expected[id]
		if e := v.latest(id); e != nil && e.ExpiresAt != nil && *e.ExpiresAt <= end.Sent.Unix() {
			continue // expired
		}
		return violation("job %s is not listed after the run, though it was neither deleted nor expired: lost", []Op{o, end}, id), ""
	}
	return nil, ""
}

// latest is the job's last object in the history.
func (v *view) latest(id string) *Object {
	obs := v.observations(id)
	if len(obs) == 0 {
		return nil
	}
	return obs[len(obs)-1].Object
}

func holdFields(v *view) (*Violation, string) {
	for _, id := range v.jobs() {
		create, ok := v.creates[id]
		if !ok {
			continue
		}
		asked := create.Fields
		want := asked["seconds"]
		nf, err1 := strconv.Atoi(asked["num_frames"])
		fps, err2 := strconv.Atoi(asked["fps"])
		if err1 == nil && err2 == nil && fps > 0 {
			want = strconv.FormatFloat(float64(nf)/float64(fps), 'g', -1, 64)
		}
		for _, o := range v.observations(id) {
			obj := o.Object
			if s := asked["size"]; s != "" && obj.Size != "" && obj.Size != s {
				return violation("job %s was asked at size %s; its object says %s", v.with(id, o), id, s, obj.Size), ""
			}
			if p := asked["prompt"]; p != "" && obj.Prompt != "" && obj.Prompt != p {
				return violation("job %s was asked for prompt %q; its object says %q", v.with(id, o), id, p, obj.Prompt), ""
			}
			if want != "" && obj.Seconds != "" && !sameSeconds(want, obj.Seconds) {
				return violation("job %s was asked for %s s (num_frames %s at fps %s); its object says seconds %q", v.with(id, o), id, want, asked["num_frames"], asked["fps"], obj.Seconds), ""
			}
		}
	}
	return nil, ""
}

func sameSeconds(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}
