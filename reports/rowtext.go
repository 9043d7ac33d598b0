package reports

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mediaqual/mediaqual/models/spec"
)

// What Markdown and HTML both show, computed once so the two never disagree.

var summaryColumns = []string{"checkpoint", "label", "outcome", "inventory status", "stages",
	"client p50/p95 ms", "Task p50/p95 ms", "overhead p50 ms", "throughput"}

// summaryCells is a row's line in the result table, one cell per summaryColumns.
func summaryCells(row Row) []string {
	stages := make([]string, len(row.Stages))
	for i, s := range row.Stages {
		stages[i] = s.Name + " " + s.Mark()
	}
	tm, thr := "—", "—"
	task, over := "—", "—"
	if t := row.Timing; t != nil && t.Requests > 0 {
		tm = fmt.Sprintf("%.1f / %.1f", t.ClientP50MS, t.ClientP95MS)
		task = fmt.Sprintf("%.1f / %.1f", t.TaskP50MS, t.TaskP95MS)
		over = fmt.Sprintf("%.1f", t.OverheadP50MS)
		thr = throughput(row.Workload, t)
	}
	outcome := row.Outcome
	if row.Gap != "" {
		outcome += ": " + row.Gap
	}
	return []string{row.Checkpoint, row.Label, outcome, string(row.Status), strings.Join(stages, ", "), tm, task, over, thr}
}

// detail is one line of a row's details after its label and outcome.
type detail struct {
	Name, Text string
	Code       bool // a command
	Stage      bool // a stage's message (Markdown shows its first line)
	Failed     bool // a failed stage
}

func details(row Row) []detail {
	var ds []detail
	add := func(name, format string, args ...any) {
		ds = append(ds, detail{Name: name, Text: fmt.Sprintf(format, args...)})
	}
	if row.Note != "" {
		add("note", "%s", row.Note)
	}
	if row.Earned != "" {
		add("earned", "%s", row.Earned)
	}
	for _, l := range row.Limits {
		add("limit", "at most %s: %s", l.Ceiling, l.Why)
	}
	for _, f := range row.Findings {
		add("finding", "%s", f)
	}
	if l := row.Load; l != nil {
		add("load", "ready in %.1f s (timeout %.0f s, from %s)", l.ReadyS, l.TimeoutS, l.From)
	}
	if len(row.ReferenceSSIM) > 0 {
		add("reference SSIM", "%s", joinSorted(row.ReferenceSSIM, ", ", func(v float64) string { return fmt.Sprintf("%.3f", v) }))
	}
	if s := row.Settings; s != nil {
		frames := ""
		if s.NumFrames > 0 {
			frames = fmt.Sprintf(", %d frames @ %d fps", s.NumFrames, s.FPS)
		}
		engine := ""
		if row.Engine != "" {
			engine = "; engine " + row.Engine
		}
		add("settings", "%s%s, %d steps, guidance %g, seed %d; precision %s%s; revision %s",
			s.Size, frames, s.Steps, s.Guidance, s.Seed, row.Precision, engine, orDash(row.Revision))
	}
	for _, kv := range []struct {
		name string
		m    map[string]string
	}{{"bundle", row.Bundle}, {"dataset", row.Dataset}, {"versions", row.Versions}} {
		if len(kv.m) > 0 {
			add(kv.name, "%s", joinMap(kv.m))
		}
	}
	if row.Endpoint != "" {
		add("endpoint", "%s (%s)", row.Endpoint, row.Mode)
	}
	if row.Layout != "" {
		add("layout", "%s", row.Layout)
	}
	if row.Parity != nil {
		add("parity", "%s", row.Parity)
	} else if row.Engine != "" {
		add("parity", "not reported by the server")
	}
	if row.Hardware != "" {
		add("hardware", "%s", row.Hardware)
	}
	if len(row.Counts) > 0 {
		add("counts", "%s", joinSorted(row.Counts, ", ", strconv.Itoa))
	}
	if t := row.Timing; t != nil && t.Requests > 0 {
		poll := ""
		if t.PollIntervalMS > 0 {
			poll = fmt.Sprintf("; poll every %.0f ms", t.PollIntervalMS)
		}
		if t.PollHoldMS > 0 {
			poll += fmt.Sprintf(", each held by the server until the job changed (at most %.0f ms)", t.PollHoldMS)
		}
		add(fmt.Sprintf("timing (%d measured requests, client latency from %s)", t.Requests, t.Source),
			"client p50 %.1f / p95 %.1f / max %.1f ms; Task p50 %.1f / p95 %.1f ms; overhead p50 %.1f ms%s; %s; %s",
			t.ClientP50MS, t.ClientP95MS, t.ClientMaxMS, t.TaskP50MS, t.TaskP95MS, t.OverheadP50MS, poll, throughput(row.Workload, t), peakMemory(t.PeakMemoryMB))
		if len(t.Parts) > 0 {
			parts := make([]string, len(t.Parts))
			for i, p := range t.Parts {
				parts[i] = fmt.Sprintf("%s %.1f", p.Name, p.MS)
			}
			add("where the time went (p50 ms)", "%s", strings.Join(parts, ", "))
		}
		if t.DenoiseTFLOPPerStep > 0 && t.DenoiseMSPerStep > 0 {
			add("task speed", "denoise %.1f ms a step for %.1f TFLOP a step (the family's count): %.0f TFLOP/s",
				t.DenoiseMSPerStep, t.DenoiseTFLOPPerStep, t.AchievedTFLOPS)
		}
		if t.EncodePSNRMeanDB > 0 {
			add("encode quality", "PSNR of decoded artifacts against their raw frames: mean %.2f dB, worst %.2f dB", t.EncodePSNRMeanDB, t.EncodePSNRMinDB)
		}
	}
	for _, s := range row.Stages {
		if s.Message != "" {
			mark := s.Mark()
			if mark == "FAIL" {
				mark = "FAILED"
			}
			ds = append(ds, detail{Name: s.Name + " " + mark, Text: s.Message, Stage: true, Failed: !s.Passed && !s.NotRun})
		}
	}
	if row.AIPerfCommand != "" {
		ds = append(ds, detail{Name: "AIPerf", Text: row.AIPerfCommand, Code: true})
	}
	return append(ds, detail{Name: "reproduce", Text: row.Command, Code: true})
}

var inventoryColumns = []string{"checkpoint", "workload", "family", "profile", "revision", "precision",
	"pinned settings", "status", "note"}

// inventoryRow is one line of the inventory table: an entry, or a variant under it.
type inventoryRow struct {
	Cells   []string // one per inventoryColumns
	Variant bool
}

func inventoryRows(inv []spec.Entry) []inventoryRow {
	var rows []inventoryRow
	for _, e := range inv {
		settings := "—"
		if e.Status != spec.Excluded {
			d := e.Defaults
			settings = fmt.Sprintf("%s, %d steps, guidance %g, seed %d", d.Size, d.Steps, d.Guidance, d.Seed)
			if e.Workload == spec.TextToVideo {
				settings = fmt.Sprintf("%s, %d frames @ %d fps, %d steps, guidance %g, seed %d", d.Size, d.NumFrames, d.FPS, d.Steps, d.Guidance, d.Seed)
			}
		}
		rev := e.Revision
		if rev == "" {
			rev = "unpinned"
		}
		rows = append(rows, inventoryRow{Cells: []string{e.ID, string(e.Workload), e.Family, e.Profile, rev,
			orDash(e.Precision), settings, string(e.Status), e.Note}})
		for _, v := range e.Variants {
			rows = append(rows, inventoryRow{Variant: true, Cells: []string{
				fmt.Sprintf("↳ variant %s of %s", v.Name, e.ID), "", "", "", "", "", "", string(v.Status), v.Note}})
		}
	}
	return rows
}

// peakMemory is the server's peak accelerator memory; 0 is what a server reports when it
// measures none (a CPU Task), so it is not shown as a figure.
func peakMemory(mb float64) string {
	if mb <= 0 {
		return "peak memory not reported"
	}
	return fmt.Sprintf("peak memory %.0f MB", mb)
}
