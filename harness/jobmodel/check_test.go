package jobmodel

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Unix(1_800_000_000, 0)

// at is an exchange sent at t0+ms and answered 5 ms later.
func at(ms int, o Op) Op {
	o.Sent = t0.Add(time.Duration(ms) * time.Millisecond)
	o.Received = o.Sent.Add(5 * time.Millisecond)
	if o.Status == 0 {
		o.Status = 200
	}
	if o.By == "" {
		o.By = "suite"
	}
	return o
}

func obj(id, status string, mods ...func(*Object)) *Object {
	created := t0.Unix()
	o := &Object{ID: id, Model: "m", Status: status, CreatedAt: &created, Size: "64x64", Seconds: "1", Prompt: "p"}
	if status == "completed" {
		done := t0.Unix() + 1
		exp := done + 3600
		o.CompletedAt, o.ExpiresAt = &done, &exp
	}
	for _, m := range mods {
		m(o)
	}
	return o
}

var asked = map[string]string{"model": "m", "prompt": "p", "size": "64x64", "num_frames": "8", "fps": "8"}

// faithful is a history a correct server gives: a list, a create, polls, content before and
// after completion (twice), a delete, the deleted job asked again, a list.
func faithful() []Op {
	return []Op{
		at(0, Op{Kind: List}),
		at(10, Op{Kind: Create, Job: "v1", Fields: asked, Object: obj("v1", "queued")}),
		at(20, Op{Kind: Content, Job: "v1", Status: 409, Code: "job_not_complete"}),
		at(30, Op{Kind: Poll, Job: "v1", Object: obj("v1", "in_progress", func(o *Object) { p := 40.0; o.Progress = &p })}),
		at(1500, Op{Kind: Poll, Job: "v1", Object: obj("v1", "completed")}),
		at(1510, Op{Kind: Poll, Job: "v1", Object: obj("v1", "completed")}),
		at(1520, Op{Kind: Content, Job: "v1", Digest: "d1"}),
		at(1530, Op{Kind: Content, Job: "v1", Digest: "d1"}),
		at(1540, Op{Kind: Delete, Job: "v1"}),
		at(1550, Op{Kind: Poll, Job: "v1", Status: 404}),
		at(1560, Op{Kind: Content, Job: "v1", Status: 404}),
		at(1570, Op{Kind: List}),
	}
}

func TestFaithfulHistoryKeepsEveryRule(t *testing.T) {
	r := Check(number(faithful()), Options{Exclusive: true, Videos: true})
	assert.Empty(t, r.Violations)
	assert.Empty(t, r.Unheld)
	assert.Len(t, r.Held, len(Rules))
}

func number(ops []Op) []Op {
	for i := range ops {
		ops[i].N = i
	}
	return ops
}

// TestEachRuleNamesItsViolation breaks the faithful history the way each rule's fault does
// and asserts that rule's check, and no other, names it.
func TestEachRuleNamesItsViolation(t *testing.T) {
	for _, tc := range []struct {
		check string
		lie   func([]Op) []Op
	}{
		{"job-identity", func(h []Op) []Op { h[4].Object = obj("v0", "completed"); return h }},
		{"job-identity", func(h []Op) []Op { h[1].Object.Model = "other"; return h }},
		{"job-identity", func(h []Op) []Op { h[1].RequestID, h[5].Object.RequestID = "r1", "r2"; return h }},
		{"job-status", func(h []Op) []Op { h[5].Object = obj("v1", "in_progress"); return h }},
		{"job-status", func(h []Op) []Op { p := 20.0; h[4].Object.Progress = &p; h[3].Object.Status = "queued"; return h }},
		{"job-timestamps", func(h []Op) []Op {
			ms := (t0.Unix() + 1) * 1000
			h[4].Object.CompletedAt, h[5].Object.CompletedAt = &ms, &ms
			return h
		}},
		{"job-timestamps", func(h []Op) []Op { c := t0.Unix() - 60; h[1].Object.CreatedAt = &c; return h }},
		{"job-content", func(h []Op) []Op { h[2].Status, h[2].Code, h[2].Digest = 200, "", "partial"; return h }},
		{"job-content", func(h []Op) []Op { h[7].Digest = "d2"; return h }},
		{"job-content", func(h []Op) []Op { h[7].Status = 500; return h }},
		{"job-deleted", func(h []Op) []Op { h[11].Listed = []Object{*obj("v1", "completed")}; return h }},
		{"job-deleted", func(h []Op) []Op { h[9].Status, h[9].Object = 200, obj("v1", "completed"); return h }},
		{"job-orphans", func(h []Op) []Op { h[11].Listed = []Object{*obj("v2", "in_progress")}; return h }},
		{"job-orphans", func(h []Op) []Op { return append(h[:8], h[11]) }}, // created, never deleted, not listed: lost
		{"job-fields", func(h []Op) []Op { h[4].Object.Seconds = "4"; return h }},
	} {
		t.Run(tc.check, func(t *testing.T) {
			r := Check(number(tc.lie(faithful())), Options{Exclusive: true, Videos: true})
			require.Len(t, r.Violations, 1, "%+v", r.Violations)
			assert.Equal(t, tc.check, r.Violations[0].Check, r.Violations[0].Error())
			assert.NotEmpty(t, r.Violations[0].Ops, "a violation names the exchanges that show it")
		})
	}
}

// TestShareEndpointOrphansAreTheSuitesOnly: on a shared endpoint another client's job is not
// an orphan; one carrying the suite's prompt is.
func TestSharedEndpointOrphansAreTheSuitesOnly(t *testing.T) {
	h := faithful()
	h[11].Listed = []Object{*obj("v9", "queued", func(o *Object) { o.Prompt = "someone else's" })}
	assert.Empty(t, Check(number(h), Options{Videos: true}).Violations)
	h[11].Listed = []Object{*obj("v9", "queued")}
	r := Check(number(h), Options{Videos: true})
	require.Len(t, r.Violations, 1)
	assert.Equal(t, "job-orphans", r.Violations[0].Check)
}

// TestUnsaidRulesAreNamed: a server with no list route and no timestamps is held to neither
// rule, and each is named, not passed.
func TestUnsaidRulesAreNamed(t *testing.T) {
	h := faithful()
	h[0].Status, h[11].Status = 404, 404
	for i := range h {
		if h[i].Object != nil {
			h[i].Object.CreatedAt, h[i].Object.CompletedAt, h[i].Object.ExpiresAt = nil, nil, nil
		}
	}
	r := Check(number(h), Options{Exclusive: true, Videos: true})
	assert.Empty(t, r.Violations)
	joined := strings.Join(r.Unheld, "\n")
	for _, c := range []string{"job-orphans: ", "job-timestamps: ", "job-content: "} {
		assert.Contains(t, joined, c)
	}
	assert.NotContains(t, r.Held, "job-orphans")
}

// TestRulesMatchTheDocs: docs/QUALIFICATION.md's table of the model is Rules, row for row.
func TestRulesMatchTheDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/QUALIFICATION.md")
	require.NoError(t, err)
	var rows []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `job-") {
			rows = append(rows, line)
		}
	}
	require.Len(t, rows, len(Rules), "one row a rule")
	for i, r := range Rules {
		assert.Equal(t, fmt.Sprintf("| `%s` | %s | %s | `%s` |", r.Check, r.Says, r.For, r.Fault), rows[i])
	}
}
