package mediaqual_test

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io/fs"
	"net/http"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"mediaqual/fixtures"
	"mediaqual/harness/aiperf"
	"mediaqual/harness/check"
	"mediaqual/harness/client"
	"mediaqual/harness/launch"
	"mediaqual/harness/ledger"
	"mediaqual/harness/media"
	"mediaqual/models"
	"mediaqual/models/bundle"
	"mediaqual/models/spec"
	"mediaqual/reports"
)

// pollEvery is the suite's stated polling cadence for video jobs.
const pollEvery = 100 * time.Millisecond

// workItem is one pinned input: the request fields and, for image_edit, the reference sent.
type workItem struct {
	key    string
	fields map[string]string
	ref    []byte
}

type nativeResult struct {
	path, sha256, framesSHA256 string
	raw                        string   // the raw rgb24 frames the artifact was encoded from
	decoded                    []string // digests of the decoded frames (or image)
}

type servedModel struct {
	srv         *launch.Server
	api         *client.Client
	artifactDir string
	ledgerPath  string
}

// items are the checkpoint's pinned inputs: its fixture set at its pinned settings.
func (q *qualification) items() ([]workItem, error) {
	e := q.entry
	set, err := fixtures.Load(e.Fixtures)
	if err != nil {
		return nil, err
	}
	q.row.Dataset = map[string]string{}
	for f, d := range set.Files {
		q.row.Dataset[f] = d[:16]
	}
	var out []workItem
	for i, p := range set.Prompts {
		s := e.Defaults
		s.Prompt = p.Text
		out = append(out, workItem{key: fmt.Sprintf("prompt-%d", i), fields: s.Fields(e.Controls, e.Workload)})
	}
	for _, ed := range set.Edits {
		s := e.Defaults
		s.Prompt = ed.Instruction
		ref, err := fixtures.Image(ed.Image, s.Size.W, s.Size.H)
		if err != nil {
			return nil, err
		}
		q.row.Dataset["sent:"+ed.Name] = digest(ref)[:16]
		out = append(out, workItem{key: ed.Name, fields: s.Fields(e.Controls, e.Workload), ref: ref})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("fixture set %s has no inputs for %s", e.Fixtures, e.Workload)
	}
	return out, nil
}

func (q *qualification) inventory(t *testing.T) (string, error) {
	if p := q.entry.Problems(); len(p) > 0 {
		return "", fmt.Errorf("check inventory-row: %s", strings.Join(p, "; "))
	}
	revision := ""
	if q.entry.GPU != nil {
		if why := bundle.Missing(q.entry); why != "" {
			return "", fmt.Errorf("check gpu-environment: %s", why)
		}
		// A bundle of random weights proves mechanics and timing only; every report says so.
		if bundle.IsL0(bundle.Dir(q.entry)) {
			q.row.Profile = "L0-random"
			q.row.Label = reports.Label(q.row.Profile)
			q.limit(spec.Implemented, "L0-random weights prove mechanics and timing only")
		}
		// The weights are identified before anything loads them.
		var err error
		if revision, err = q.revision(); err != nil {
			return "", err
		}
		if err := gpuPreCheck(q.entry); err != nil {
			return "", err
		}
	}
	if q.entry.Status == spec.Excluded {
		return q.entry.Note, nil
	}
	if q.entry.NewTask == nil && len(q.entry.Worker) == 0 {
		return "", fmt.Errorf("check inventory-task: %s is %s and has no native Task to run (%s)", q.entry.ID, q.entry.Status, q.entry.Note)
	}
	return fmt.Sprintf("row complete; status %s%s; reconciled against /v1/models in serve", q.entry.Status, revision), nil
}

// revision holds the commit the bundle states to the row's revision (check bundle-revision)
// and returns what it established. A row without a revision runs, but can earn no more than
// implemented; an L0-random bundle is no revision's weights, so it is not held to one.
func (q *qualification) revision() (string, error) {
	dir, want := bundle.Dir(q.entry), q.entry.Revision
	commit, source, err := bundle.Revision(dir)
	if err != nil {
		return "", fmt.Errorf("check bundle-revision: %w", err)
	}
	q.commit = commit
	switch {
	case bundle.IsL0(dir) && commit == "":
		return "; L0-random bundle: no revision to check", nil
	case want == "":
		stated := "states none either"
		if commit != "" {
			stated = "holds " + commit + " (" + source + ")"
		}
		q.limit(spec.Implemented, "the row pins no revision (the bundle "+stated+"): nobody pinned these weights")
		return "; the row pins no revision, the bundle " + stated, nil
	}
	if err := check.Revision(want, commit, source); err != nil {
		return "", err
	}
	return fmt.Sprintf("; bundle revision %s matches the row's %s", commit, want), nil
}

// limit records what keeps this run below the top of the ladder.
func (q *qualification) limit(ceiling spec.Status, why string) {
	q.row.Limits = append(q.row.Limits, reports.Limit{Ceiling: ceiling, Why: why})
}

// publishedDigest holds the bundle's digest to the one a published qualification of the same
// revision on real weights recorded (check bundle-digest), and says what it compared.
func (q *qualification) publishedDigest(sum string) (string, error) {
	if q.commit == "" || q.row.Profile != "full" {
		return "", nil
	}
	rows, from, err := reports.Published(publishedDir)
	if err != nil {
		return "", err
	}
	for i, r := range rows {
		if r.Checkpoint == q.entry.ID && r.Profile == "full" && r.Bundle["revision"] == q.commit {
			if err := check.BundleDigest(sum, r.Bundle["sha256"], from[i]); err != nil {
				return "", err
			}
			return "; bundle digest equals " + from[i] + "'s", nil
		}
	}
	return "; no published qualification of revision " + q.commit + " to compare the bundle digest with", nil
}

// publishedDir holds the published runs (the module root is the root package's directory).
const publishedDir = "reports/published"

// correctness runs the family's native path on every pinned input and applies the family's
// criteria there, before any server is involved.
func (q *qualification) correctness(t *testing.T) (string, error) {
	items, err := q.items()
	if err != nil {
		return "", err
	}
	bundleHashed := func() (string, error) { return "", nil }
	if q.entry.Bundle == "" {
		// The reference families are compiled into mediaserve, so the binary is the bundle.
		sum := sha256.New()
		bin, _ := os.ReadFile(mediaserveBin)
		sum.Write(bin)
		q.row.Bundle = map[string]string{"served": "mediaserve " + q.entry.ID + "@" + q.entry.Revision, "sha256": hex.EncodeToString(sum.Sum(nil))[:16]}
	} else {
		dir := bundle.Dir(q.entry)
		// Hashing tens of GB takes as long as a few Tasks: it runs on the CPU while the native
		// path runs on the GPU.
		type hashed struct {
			sum string
			n   int
			err error
		}
		done := make(chan hashed, 1)
		go func() {
			d, n, _, err := bundle.Digest(dir)
			done <- hashed{d, n, err}
		}()
		bundleHashed = func() (string, error) {
			d := <-done
			if d.err != nil {
				return "", d.err
			}
			q.row.Bundle = map[string]string{"served": dir, "sha256": d.sum[:16], "files": strconv.Itoa(d.n)}
			if q.commit != "" {
				q.row.Bundle["revision"] = q.commit
			}
			return q.publishedDigest(d.sum)
		}
		if out, err := exec.Command("python3", "-c", "import torch, diffusers; print(torch.__version__, diffusers.__version__)").Output(); err == nil {
			if f := strings.Fields(string(out)); len(f) == 2 {
				q.row.Versions = map[string]string{"torch": f[0], "diffusers": f[1]}
			}
		}
	}

	goldens, update, err := loadGoldens(q.entry)
	if err != nil {
		return "", err
	}
	// Every input runs natively even after one fails a check, so identity has a native
	// counterpart for each and the message lists every failure.
	native, err := q.runNative(items)
	digestNote, herr := bundleHashed()
	if herr != nil {
		return "", herr
	}
	if err != nil {
		return "", err
	}
	refs := q.referenceOutputs()
	written, err := refs.write(native, q.entry.Workload)
	if err != nil {
		return "", err
	}
	defer func() {
		if refs != nil && len(refs.ssim) > 0 {
			q.row.ReferenceSSIM = refs.ssim
		}
	}()
	var failed []error
	for _, it := range items {
		n := native[it.key]
		frames, err := q.validate(t, n.path, it)
		if err != nil {
			failed = append(failed, fmt.Errorf("native %s: %w", it.key, err))
		}
		if n.decoded, err = q.frameDigests(n.path, frames); err != nil {
			return "", fmt.Errorf("native %s: %w", it.key, err)
		}
		q.native[it.key] = n
		if goldens != nil {
			if err := checkGolden(goldens, update, q.entry.ID+"/"+it.key, n.framesSHA256, q.entry.Goldens); err != nil {
				failed = append(failed, err)
			}
		}
		if err := refs.compare(q.ctx, it.key, frames, q.entry.Workload); err != nil {
			failed = append(failed, fmt.Errorf("native %s: %w", it.key, err))
		}
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	if update {
		if err := saveGoldens(q.entry, goldens); err != nil {
			return "", err
		}
	}
	summary := fmt.Sprintf("%d native outputs valid under the family contract", len(items))
	if goldens != nil {
		summary += " and equal to the goldens"
	}
	if written > 0 {
		summary += fmt.Sprintf("; wrote %d reference outputs to %s (%s=1): compared from the next run on", written, refs.dir, envWriteReferenceOutputs)
	} else if refs != nil {
		summary += "; " + refs.summary()
	}
	return summary + digestNote, nil
}

// referenceOutputs is the row's criterion against the reference outputs its bundle carries
// (spec.ReferenceOutputsDir), nil where the row declares none.
func (q *qualification) referenceOutputs() *referenceOutputs {
	if q.entry.ReferenceOutputs == nil {
		return nil
	}
	return &referenceOutputs{dir: filepath.Join(os.Getenv("MEDIAQUAL_BUNDLES"), q.entry.Bundle, spec.ReferenceOutputsDir),
		c: *q.entry.ReferenceOutputs, lowest: 1}
}

type referenceOutputs struct {
	dir      string
	c        spec.ReferenceOutputs
	compared int
	lowest   float64            // the lowest mean SSIM seen
	ssim     map[string]float64 // input -> mean SSIM measured, passed or not
	written  bool               // this run wrote them: nothing to compare
}

// compare holds one native output's frames (nil when they could not be decoded) to the
// reference output for its input. A bundle without reference outputs compares nothing; one
// with them must have one for every pinned input.
func (r *referenceOutputs) compare(ctx context.Context, key string, got []*image.RGBA, w spec.Capability) error {
	if r == nil || r.written || !r.present() || got == nil {
		return nil
	}
	want, err := decodeAll(ctx, filepath.Join(r.dir, key+extension(w)), w)
	if err != nil {
		return fmt.Errorf("check reference-output: %s: %w", key, err)
	}
	s, err := check.ReferenceOutput(got, want, r.c)
	if !math.IsNaN(s) && (err == nil || s != 0) {
		if r.ssim == nil {
			r.ssim = map[string]float64{}
		}
		r.ssim[key] = s
	}
	if err != nil {
		return err
	}
	r.compared++
	r.lowest = min(r.lowest, s)
	return nil
}

// envWriteReferenceOutputs, set to 1, makes the correctness stage write its native outputs as
// the bundle's reference outputs where it has none: the adapter's exact recipe (device,
// generator, seeds, negative prompt, steps), for a later run on another machine or stack.
const envWriteReferenceOutputs = "MEDIAQUAL_WRITE_REFERENCE_OUTPUTS"

// write copies each native output to the reference-output directory when asked and the bundle
// has none yet; it returns how many it wrote (and compare then has nothing to hold them to).
func (r *referenceOutputs) write(native map[string]nativeResult, w spec.Capability) (int, error) {
	if r == nil || os.Getenv(envWriteReferenceOutputs) != "1" || r.present() {
		return 0, nil
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return 0, err
	}
	for key, n := range native {
		b, err := os.ReadFile(n.path)
		if err == nil {
			err = os.WriteFile(filepath.Join(r.dir, key+extension(w)), b, 0o644)
		}
		if err != nil {
			return 0, fmt.Errorf("writing reference outputs: %w", err)
		}
	}
	r.written = true
	return len(native), nil
}

func (r *referenceOutputs) present() bool {
	_, err := os.Stat(r.dir)
	return !errors.Is(err, fs.ErrNotExist)
}

func (r *referenceOutputs) summary() string {
	if !r.present() {
		return "the bundle carries no reference outputs (" + spec.ReferenceOutputsDir + "/): not compared"
	}
	return fmt.Sprintf("%d outputs match the bundle's reference outputs (lowest mean SSIM %.3f, at least %.3f)", r.compared, r.lowest, r.c.MinSSIM)
}

// decodeAll decodes a clip's frames, or an image as one frame.
func decodeAll(ctx context.Context, path string, w spec.Capability) ([]*image.RGBA, error) {
	if w == spec.TextToVideo {
		return media.DecodeFrames(ctx, path)
	}
	img, err := media.DecodeImage(path)
	if err != nil {
		return nil, err
	}
	return []*image.RGBA{media.ToRGBA(img)}, nil
}

// checkGolden compares an output's frame digest with its golden, or records it when update.
func checkGolden(goldens map[string]string, update bool, key, frames, file string) error {
	switch want, ok := goldens[key]; {
	case update:
		goldens[key] = frames
	case !ok:
		return fmt.Errorf("check golden: no golden for %s in %s; record with MEDIAQUAL_UPDATE_GOLDENS=1", key, file)
	case want != frames:
		return fmt.Errorf("check golden: %s frames %s, golden %s (refresh only with MEDIAQUAL_UPDATE_GOLDENS=1 after a deliberate change)", key, frames[:12], want[:12])
	}
	return nil
}

// runNative runs every input on the native path in one `mediaserve task -batch` process, so
// the weights load once, and reads back each job's record.
func (q *qualification) runNative(items []workItem) (map[string]nativeResult, error) {
	var batch bytes.Buffer
	enc := json.NewEncoder(&batch)
	for _, it := range items {
		dir := filepath.Join(q.dir, "native", it.key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		job := map[string]any{"out": dir, "fields": it.fields}
		if it.ref != nil {
			ref := filepath.Join(dir, "reference.png")
			if err := os.WriteFile(ref, it.ref, 0o644); err != nil {
				return nil, err
			}
			job["reference"] = ref
		}
		if err := enc.Encode(job); err != nil {
			return nil, err
		}
	}
	batchPath := filepath.Join(q.dir, "native", "batch.jsonl")
	if err := os.WriteFile(batchPath, batch.Bytes(), 0o644); err != nil {
		return nil, err
	}
	timeout, _, err := bundle.LoadTimeout(q.entry)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(q.ctx, mediaserveBin, "task", "-model", q.entry.ID, "-capability", string(q.entry.Workload),
		"-batch", batchPath, "-load-timeout", timeout.String(), "-raw", "-engine", os.Getenv("MEDIAQUAL_ENGINE"))
	cmd.Env = append(os.Environ(), rootEnv())
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("native path: %v\n%s", err, out)
	}
	res := map[string]nativeResult{}
	for _, it := range items {
		var rec struct {
			Product struct {
				Path         string `json:"path"`
				SHA256       string `json:"sha256"`
				FramesSHA256 string `json:"frames_sha256"`
			} `json:"product"`
		}
		b, err := os.ReadFile(filepath.Join(q.dir, "native", it.key, "actual.json"))
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			return nil, fmt.Errorf("native path %s: reading actual.json: %w", it.key, err)
		}
		res[it.key] = nativeResult{path: rec.Product.Path, sha256: rec.Product.SHA256, framesSHA256: rec.Product.FramesSHA256,
			raw: filepath.Join(q.dir, "native", it.key, "frames.rgb")}
	}
	return res, nil
}

// validate applies every artifact check to a file: container shape, decoded frames and the
// family's validity contract. It returns the decoded frames (an image is one frame), nil when
// a check failed before decoding.
func (q *qualification) validate(t *testing.T, path string, it workItem) ([]*image.RGBA, error) {
	e := q.entry
	want := e.Defaults
	if q.entry.Workload == spec.TextToVideo {
		info, err := media.ReadMP4File(path)
		if err != nil {
			return nil, &check.Failure{Check: "container", Detail: err.Error()}
		}
		if err := check.Clip(info, want); err != nil {
			return nil, err
		}
		p, err := media.FFprobe(q.ctx, path)
		if err != nil {
			return nil, &check.Failure{Check: "decodable", Detail: err.Error()}
		}
		if err := check.Decoded(p, want); err != nil {
			return nil, err
		}
		frames, err := media.DecodeFrames(q.ctx, path)
		if err != nil {
			return nil, &check.Failure{Check: "decodable", Detail: err.Error()}
		}
		if len(frames) != want.NumFrames {
			return frames, &check.Failure{Check: "decoded-frames", Detail: fmt.Sprintf("decoded %d frames, asked %d", len(frames), want.NumFrames)}
		}
		_, err = check.Motion(frames, *e.Video)
		return frames, err
	}
	out, err := media.DecodeImage(path)
	if err != nil {
		return nil, &check.Failure{Check: "decodable", Detail: err.Error()}
	}
	frames := []*image.RGBA{media.ToRGBA(out)}
	ref, err := media.DecodeImageBytes(it.ref)
	if err != nil {
		return frames, err
	}
	_, err = check.Edit(out, ref, want.Size, *e.Edit)
	return frames, err
}

// frameDigests are the digests of an artifact's decoded frames: of frames when validate
// decoded them, else decoded here (a file that failed its checks still gets compared).
func (q *qualification) frameDigests(path string, frames []*image.RGBA) ([]string, error) {
	if frames == nil {
		var err error
		if frames, err = decodeAll(q.ctx, path, q.entry.Workload); err != nil {
			return nil, err
		}
	}
	return media.FrameDigests(frames), nil
}

// serve launches mediaserve for this checkpoint, waits for readiness (load is not timed) and
// reconciles what it declares with the inventory.
func (q *qualification) serve(t *testing.T) (string, error) {
	s := &servedModel{artifactDir: filepath.Join(q.dir, "artifacts"), ledgerPath: filepath.Join(q.dir, "ledger.jsonl")}
	cfg := launch.Config{
		Binary: mediaserveBin, URLFromStdout: true, Dir: q.dir, GPUs: os.Getenv("MEDIAQUAL_GPUS"), Env: []string{rootEnv()},
		Args: []string{"-port", "0", "-model", q.entry.ID, "-artifact-dir", s.artifactDir, "-ledger", s.ledgerPath,
			"-engine", os.Getenv("MEDIAQUAL_ENGINE")},
	}
	timeout, from, err := bundle.LoadTimeout(q.entry)
	if err != nil {
		return "", fmt.Errorf("check launch: %w", err)
	}
	// The worker's own load timeout ends first and names the row; readiness waits a minute more
	// for the process around it.
	cfg.Args = append(cfg.Args, "-load-timeout", timeout.String())
	cfg.ReadyTimeout = timeout + time.Minute
	if f := os.Getenv(envFault); f != "" {
		// The fault self-test (faults_test.go) serves a deliberately broken server; the row
		// says so, and the stages must catch it.
		cfg.Args = append(cfg.Args, "-fault", f)
		q.row.Note = "FAULT INJECTED (" + f + "): not a qualification; " + q.row.Note
	}
	start := time.Now()
	srv, err := launch.Launch(cfg)
	if err != nil {
		return "", fmt.Errorf("check launch: %w\n%s", err, bundle.RaiseHint(timeout, from))
	}
	q.row.Load = &reports.Load{ReadyS: time.Since(start).Seconds(), TimeoutS: timeout.Seconds(), From: from}
	q.t.Cleanup(func() { _ = srv.Stop() })
	s.srv = srv
	s.api = &client.Client{BaseURL: srv.URL, PollEvery: pollEvery}
	q.server = s
	q.row.Endpoint = srv.URL
	for k, v := range versions() {
		if q.row.Versions == nil {
			q.row.Versions = map[string]string{}
		}
		q.row.Versions[k] = v
	}

	served, err := s.api.Models(q.ctx)
	if err != nil {
		return "", err
	}
	if err := reconcile(served, q.entry); err != nil {
		return "", err
	}
	for _, m := range served {
		if m.ID == q.entry.ID {
			q.row.Mode = "mediaserve launched by the suite, " + m.Runtime + " Task runtime"
		}
	}
	return fmt.Sprintf("ready at %s in %.1f s (load timeout %s, from %s); /v1/models reconciles with the inventory", srv.URL, q.row.Load.ReadyS, timeout, from), nil
}

// reconcile fails when the server declares a model or capability the inventory does not back.
func reconcile(served []client.Model, e spec.Entry) error {
	found := false
	for _, m := range served {
		inv, err := models.Lookup(m.ID)
		if err != nil {
			return fmt.Errorf("check reconcile: served model %s is not in the inventory", m.ID)
		}
		for _, c := range m.Capabilities {
			if !inv.Has(spec.Capability(c)) {
				return fmt.Errorf("check reconcile: %s declares %s, which its inventory row does not", m.ID, c)
			}
		}
		if m.Revision != inv.Revision || m.Precision != inv.Precision || m.Profile != inv.Profile {
			return fmt.Errorf("check reconcile: %s serves revision %q precision %q profile %q; inventory says %q %q %q",
				m.ID, m.Revision, m.Precision, m.Profile, inv.Revision, inv.Precision, inv.Profile)
		}
		if m.ID == e.ID {
			found = true
			if !m.Has(string(e.Workload)) {
				return fmt.Errorf("check reconcile: %s does not declare %s", m.ID, e.Workload)
			}
		}
	}
	if !found {
		return fmt.Errorf("check reconcile: %s is not served", e.ID)
	}
	return nil
}

// artifacts fetches the artifact of every request of the AIPerf run (AIPerf throws videos
// away), checks it against what the server declared, and applies every artifact check.
func (q *qualification) artifacts(t *testing.T) (string, error) {
	if len(q.served) == 0 {
		return "", errors.New("no AIPerf requests to check: the aiperf stage failed")
	}
	entries, err := ledger.Read(q.server.ledgerPath)
	if err != nil {
		return "", err
	}
	var failed []error // every artifact is fetched and kept; each failure is listed
	for i := range q.served {
		s := &q.served[i]
		var data []byte
		if q.entry.Workload == spec.TextToVideo {
			if data, _, err = q.server.api.Content(q.ctx, s.jobID); err != nil {
				return "", fmt.Errorf("check artifact-fetch: request %s, completed job %s: %w", s.requestID, s.jobID, err)
			}
		} else if data, err = editImage(s.raw); err != nil {
			return "", fmt.Errorf("request %s: %w", s.requestID, err)
		}
		s.sha256 = digest(data)
		line := ledger.Terminal(entries, s.requestID)
		if len(line) != 1 || line[0].Output == nil {
			return "", fmt.Errorf("check ledger-digest: request %s has no single completed ledger line", s.requestID)
		}
		if err := check.Digest("ledger-digest", s.sha256, line[0].Output.SHA256); err != nil {
			return "", fmt.Errorf("request %s (job %s): %w", s.requestID, s.jobID, err)
		}
		s.path = filepath.Join(q.dir, "http", fmt.Sprintf("%s-%s%s", s.item.key, s.jobID, extension(q.entry.Workload)))
		if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(s.path, data, 0o644); err != nil {
			return "", err
		}
		frames, err := q.validate(t, s.path, s.item)
		if err != nil {
			failed = append(failed, fmt.Errorf("served %s (request %s, job %s): %w", s.item.key, s.requestID, s.jobID, err))
		}
		if s.decoded, err = q.frameDigests(s.path, frames); err != nil {
			failed = append(failed, fmt.Errorf("served %s (request %s, job %s): %w", s.item.key, s.requestID, s.jobID, err))
		}
		if n, ok := q.native[s.item.key]; ok && frames != nil && n.framesSHA256 == line[0].Output.FramesSHA256 {
			// The served artifact was encoded from exactly the native raw frames.
			if s.psnr, err = encodePSNR(n.raw, frames); err != nil {
				failed = append(failed, fmt.Errorf("served %s (request %s, job %s): %w", s.item.key, s.requestID, s.jobID, err))
			}
		}
	}
	if err := q.showArtifact(q.measured()); err != nil {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		return "", errors.Join(failed...)
	}
	q.row.Counts["artifacts_verified"] = len(q.served)
	return fmt.Sprintf("%d artifacts of the AIPerf run fetched, matched to the ledger's digests and verified", len(q.served)), nil
}

// edit is the suite's own image edit (for the influence probe, not load): one request
// through the client, its PNG checked against the declared digest and kept.
func (q *qualification) edit(it workItem, requestID string) (string, error) {
	fields := map[string]string{"model": q.entry.ID}
	for k, v := range it.fields {
		fields[k] = v
	}
	r, err := q.server.api.Edit(q.ctx, fields, it.ref, "reference.png", requestID)
	if err != nil {
		return "", err
	}
	if err := check.Digest("artifact-digest", digest(r.PNG), r.SHA256); err != nil {
		return "", err
	}
	path := filepath.Join(q.dir, "probe", requestID+".png")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, r.PNG, 0o644)
}

// identity compares every served artifact with the native artifact for the same inputs.
func (q *qualification) identity(t *testing.T) (string, error) {
	if len(q.served) == 0 || q.served[0].path == "" {
		return "", errors.New("no served artifacts: the artifacts stage failed")
	}
	for _, s := range q.served {
		n, ok := q.native[s.item.key]
		if !ok {
			return "", fmt.Errorf("no native result for %s", s.item.key)
		}
		if err := check.Identity(s.sha256, n.sha256, s.decoded, n.decoded); err != nil {
			return "", fmt.Errorf("%s (request %s): %w", s.item.key, s.requestID, err)
		}
	}
	return fmt.Sprintf("%d served artifacts byte-identical to the native path, decoded frames equal", len(q.served)), nil
}

// influence is the reference-influence probe: the same instruction on two different pinned
// references.
func (q *qualification) influence(t *testing.T) (string, error) {
	if q.server == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	items, err := q.items()
	if err != nil {
		return "", err
	}
	if len(items) < 2 {
		return "", fmt.Errorf("the influence probe needs two references; fixture set has %d", len(items))
	}
	a, b := items[0], items[1]
	b.fields = a.fields // same instruction and settings, other reference
	pa, err := q.edit(a, casePrefix(q.entry.ID)+"-influence-a")
	if err != nil {
		return "", err
	}
	pb, err := q.edit(b, casePrefix(q.entry.ID)+"-influence-b")
	if err != nil {
		return "", err
	}
	imgs := make([]image.Image, 4)
	for i, src := range [][]byte{mustRead(pa), mustRead(pb), a.ref, b.ref} {
		if imgs[i], err = media.DecodeImageBytes(src); err != nil {
			return "", err
		}
	}
	gap, err := check.Influence(imgs[0], imgs[1], imgs[2], imgs[3])
	q.row.Gap = gap
	return influenceVerdict(gap, err, q.entry.ExpectGap)
}

// influenceVerdict reads the probe against the row: a gap fails the case unless the row is a
// negative control expecting exactly that gap, which fails if the probe finds none.
func influenceVerdict(gap string, err error, expect string) (string, error) {
	switch {
	case gap != "" && gap == expect:
		return "capability gap detected as expected for this negative control: " + err.Error(), nil
	case err != nil:
		return "", err
	case expect != "":
		return "", fmt.Errorf("check influence-expected-gap: the probe did not find the expected gap %q", expect)
	}
	return "outputs follow their references", nil
}

// timing sets AIPerf's client end-to-end latency against the server's Task-call wall, per
// request joined on X-Request-ID, over measured requests only (warmup, load and start-up are
// outside).
func (q *qualification) timing(t *testing.T) (string, error) {
	var lat, task, over []float64
	var first, last int64
	frames := 0
	tm := &reports.Timing{Source: "AIPerf " + aiperf.Version + " request_latency", PollIntervalMS: q.pollMS}
	for _, s := range q.measured() {
		if s.taskMS <= 0 {
			return "", fmt.Errorf("check task-wall: request %s: the server reported no Task-call wall", s.requestID)
		}
		lat = append(lat, s.latencyMS)
		task = append(task, s.taskMS)
		over = append(over, s.latencyMS-s.taskMS)
		tm.PeakMemoryMB = max(tm.PeakMemoryMB, s.peakMB)
		end := s.creditNS + int64(s.latencyMS*1e6)
		if first == 0 || s.creditNS < first {
			first = s.creditNS
		}
		last = max(last, end)
		frames += q.entry.Defaults.NumFrames
	}
	if len(lat) == 0 {
		return "", errors.New("no measured requests: the aiperf stage failed")
	}
	if b := q.entry.MaxOverheadMS; b > 0 {
		for i, s := range q.measured() {
			if over[i] > b {
				return "", fmt.Errorf("check timing-overhead: request %s took %.0f ms end to end for a %.0f ms Task: %.0f ms of serving overhead, budget %.0f ms",
					s.requestID, s.latencyMS, s.taskMS, over[i], b)
			}
		}
	}
	window := time.Duration(last - first).Seconds()
	tm.Requests = len(lat)
	tm.ClientP50MS, tm.ClientP95MS, tm.ClientMaxMS = pct(lat, 50), pct(lat, 95), pct(lat, 100)
	tm.TaskP50MS, tm.TaskP95MS = pct(task, 50), pct(task, 95)
	tm.OverheadP50MS = pct(over, 50)
	tm.Concurrency = concurrency()
	tm.Parts = timeParts(q.measured())
	if count := q.entry.DenoiseFLOPs; count != nil {
		var perStep []float64
		for _, s := range q.measured() {
			if d, ok := s.timing.TaskPhasesMS["denoise"]; ok && q.entry.Defaults.Steps > 0 {
				perStep = append(perStep, d/float64(q.entry.Defaults.Steps))
			}
		}
		if len(perStep) > 0 {
			tm.DenoiseTFLOPPerStep = count(q.entry.Defaults) / 1e12
			tm.DenoiseMSPerStep = pct(perStep, 50)
			tm.AchievedTFLOPS = tm.DenoiseTFLOPPerStep / (tm.DenoiseMSPerStep / 1000)
		}
	}
	var psnrs []float64
	for _, s := range q.measured() {
		if s.psnr > 0 {
			psnrs = append(psnrs, s.psnr)
		}
	}
	if len(psnrs) > 0 {
		tm.EncodePSNRMinDB = slices.Min(psnrs)
		for _, p := range psnrs {
			tm.EncodePSNRMeanDB += p / float64(len(psnrs))
		}
	}
	tm.ItemsPerSecond = float64(len(lat)) / window // from the first send to the last completion
	if q.entry.Workload == spec.TextToVideo {
		tm.FramesPerSecond = float64(frames) / window
	}
	q.row.Timing = tm
	var points []reports.LatencyPoint
	for i, s := range q.served {
		points = append(points, reports.LatencyPoint{Index: i, ClientMS: s.latencyMS, TaskMS: s.taskMS, Warmup: s.warmup})
	}
	if chart, err := reports.LatencyChart(points); err != nil {
		return "", err
	} else if err := q.picture(reports.LatencyKind, fmt.Sprintf("Latency per request: %s (%d warmup, %d measured)", q.entry.ID, len(q.served)-len(lat), len(lat)), "latency.png", chart); err != nil {
		return "", err
	}
	q.t.Attr("client_p50_ms", fmt.Sprintf("%.1f", tm.ClientP50MS))
	q.t.Attr("task_p50_ms", fmt.Sprintf("%.1f", tm.TaskP50MS))
	q.t.Attr("overhead_p50_ms", fmt.Sprintf("%.1f", tm.OverheadP50MS))
	q.t.Attr("items_per_s", fmt.Sprintf("%.3f", tm.ItemsPerSecond))
	return fmt.Sprintf("client p50 %.1f ms, Task p50 %.1f ms, overhead p50 %.1f ms over %d measured requests", tm.ClientP50MS, tm.TaskP50MS, tm.OverheadP50MS, tm.Requests), nil
}

// timeParts is the p50 of each part of the measured requests' time, in the ledger's order,
// then the client's share: its latency beyond the server's total (polling, HTTP, transfer).
// A Task that reports phases is shown by phase, else as one part.
func timeParts(reqs []servedRequest) []reports.TimePart {
	if len(reqs) == 0 {
		return nil
	}
	var names []string
	for name := range reqs[0].timing.TaskPhasesMS {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(phaseOrder(a), phaseOrder(b)) })
	part := func(name string, of func(s servedRequest) float64) reports.TimePart {
		xs := make([]float64, len(reqs))
		for i, s := range reqs {
			xs[i] = of(s)
		}
		return reports.TimePart{Name: name, MS: pct(xs, 50)}
	}
	parts := []reports.TimePart{part("queue", func(s servedRequest) float64 { return s.timing.QueueMS })}
	if len(names) == 0 {
		parts = append(parts, part("task", func(s servedRequest) float64 { return s.timing.TaskCallWallMS }))
	}
	for _, n := range names {
		parts = append(parts, part("task: "+n, func(s servedRequest) float64 { return s.timing.TaskPhasesMS[n] }))
	}
	return append(parts,
		part("hand-over", func(s servedRequest) float64 { return s.timing.HandoverMS }),
		part("encode wait", func(s servedRequest) float64 { return s.timing.EncodeWaitMS }),
		part("encode", func(s servedRequest) float64 { return s.timing.EncodeMS }),
		part("server other", func(s servedRequest) float64 { return s.timing.OtherMS }),
		part("client", func(s servedRequest) float64 { return s.latencyMS - s.timing.TotalMS }))
}

// phaseOrder puts known Task phases in the order they run; others follow by name.
func phaseOrder(name string) int {
	if i := slices.Index([]string{"encode_prompt", "denoise", "decode"}, name); i >= 0 {
		return i
	}
	return 100
}

// encodePSNR is the PSNR (dB, RGB) of a decoded clip against the raw rgb24 frames it was
// encoded from, over the whole clip (one mean squared error), capped at 100 dB for a
// lossless match so that it stays a number.
func encodePSNR(rawPath string, decoded []*image.RGBA) (float64, error) {
	pix, err := os.ReadFile(rawPath)
	if err != nil {
		return 0, fmt.Errorf("check encode-psnr: the native raw frames: %w", err)
	}
	w, h := decoded[0].Rect.Dx(), decoded[0].Rect.Dy()
	raw := spec.Video{W: w, H: h, N: len(decoded), Pix: pix}
	if err := raw.Check(); err != nil {
		return 0, fmt.Errorf("check encode-psnr: raw frames against the %d decoded: %w", len(decoded), err)
	}
	var mse float64
	for i, f := range decoded {
		p, err := media.PSNR(f, raw.RGBA(i))
		if err != nil {
			return 0, fmt.Errorf("check encode-psnr: frame %d: %w", i, err)
		}
		if !math.IsInf(p, 1) {
			mse += 255 * 255 / math.Pow(10, p/10) / float64(len(decoded))
		}
	}
	if mse == 0 {
		return 100, nil
	}
	return min(100, 10*math.Log10(255*255/mse)), nil
}

// picture writes img under the case's pictures/ and lists it with the row, its path relative to
// the report directory (pictures are only kept when a report is written).
func (q *qualification) picture(kind, title, name string, img image.Image) error {
	root := os.Getenv("MEDIAQUAL_REPORT_DIR")
	if root == "" {
		return nil
	}
	path := filepath.Join(q.dir, "pictures", name)
	if err := reports.WritePNG(path, img); err != nil {
		return err
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return err
	}
	q.row.Pictures = append(q.row.Pictures, reports.Picture{Kind: kind, Title: title, Path: filepath.ToSlash(rel)})
	return nil
}

// showArtifact draws the first measured artifact for people to look at: a contact sheet of a
// clip, or an edit's before/after/difference strip.
func (q *qualification) showArtifact(served []servedRequest) error {
	if len(served) == 0 || os.Getenv("MEDIAQUAL_REPORT_DIR") == "" {
		return nil
	}
	s := served[0]
	prompt := s.item.fields["prompt"]
	if q.entry.Workload == spec.TextToVideo {
		frames, err := media.DecodeFrames(q.ctx, s.path)
		if err != nil {
			return err
		}
		sheet, err := reports.ContactSheet(frames, 5)
		if err != nil {
			return err
		}
		return q.picture(reports.ContactSheetKind, fmt.Sprintf("Contact sheet: %s, %s %q (%d frames)", q.entry.ID, s.item.key, prompt, len(frames)), "contact-"+s.item.key+".png", sheet)
	}
	before, err := media.DecodeImageBytes(s.item.ref)
	if err != nil {
		return err
	}
	after, err := media.DecodeImage(s.path)
	if err != nil {
		return err
	}
	strip, err := reports.EditStrip(before, after)
	if err != nil {
		return err
	}
	return q.picture(reports.EditStripKind, fmt.Sprintf("Before / after: %s, %s %q", q.entry.ID, s.item.key, prompt), "edit-"+s.item.key+".png", strip)
}

// measured are the AIPerf requests outside warmup.
func (q *qualification) measured() []servedRequest {
	var out []servedRequest
	for _, s := range q.served {
		if !s.warmup {
			out = append(out, s)
		}
	}
	return out
}

// cleanup deletes every job and checks nothing is left: no artifact file, no job answering,
// and a clean server exit.
func (q *qualification) cleanup(t *testing.T) (string, error) {
	if q.server == nil {
		return "", errors.New("no server: the serve stage failed")
	}
	api := q.server.api
	var ids []string
	for _, s := range q.served {
		if q.entry.Workload == spec.TextToVideo && s.jobID != "" {
			ids = append(ids, s.jobID)
		}
	}
	for _, id := range ids {
		if err := api.DeleteVideo(q.ctx, id); err != nil {
			return "", fmt.Errorf("check delete: %w", err)
		}
		_, err := api.GetVideo(q.ctx, id)
		if err := goneAfterDelete(id, err); err != nil {
			return "", err
		}
	}
	if left, err := listDir(q.server.artifactDir); err != nil || len(left) > 0 {
		return "", fmt.Errorf("check no-leftover-files: %v %v", left, err)
	}
	if err := q.server.srv.Stop(); err != nil {
		return "", fmt.Errorf("check clean-exit: %w\n%s", err, q.server.srv.LogTail(20))
	}
	if left, err := listDir(q.server.artifactDir); err != nil || len(left) > 0 {
		return "", fmt.Errorf("check no-leftover-files after shutdown: %v %v", left, err)
	}
	return fmt.Sprintf("%d jobs deleted; no artifact left; clean exit", len(ids)), nil
}

// rootEnv tells mediaserve where the module is, so a family's worker script is found whatever
// directory the server runs in.
func rootEnv() string {
	root, _ := os.Getwd() // go test runs the root package in the module root
	return "MEDIAQUAL_ROOT=" + root
}

// goneAfterDelete holds what GET answered for a deleted job to the contract: 404. Any other
// error (a 500, a dropped connection) is not evidence that the job is gone.
func goneAfterDelete(id string, err error) error {
	var apiErr *client.APIError
	switch {
	case err == nil:
		return fmt.Errorf("check delete: %s still answers after delete", id)
	case !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound:
		return fmt.Errorf("check delete: GET %s after delete: want 404, got %v", id, err)
	}
	return nil
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

func versions() map[string]string {
	v := map[string]string{"go": runtime.Version()}
	if out, err := exec.Command("ffmpeg", "-version").Output(); err == nil {
		v["ffmpeg"] = strings.TrimPrefix(strings.SplitN(string(out), " Copyright", 2)[0], "ffmpeg version ")
	}
	if b, err := os.ReadFile(mediaserveBin); err == nil {
		v["mediaserve"] = digest(b)[:12]
	}
	return v
}

func loadGoldens(e spec.Entry) (map[string]string, bool, error) {
	if e.Goldens == "" {
		return nil, false, nil
	}
	update := os.Getenv("MEDIAQUAL_UPDATE_GOLDENS") == "1"
	g := map[string]string{}
	b, err := os.ReadFile(e.Goldens)
	switch {
	case errors.Is(err, os.ErrNotExist) && update:
	case err != nil:
		return nil, false, fmt.Errorf("check golden: %w", err)
	default:
		if err := json.Unmarshal(b, &g); err != nil {
			return nil, false, fmt.Errorf("check golden: %s: %w", e.Goldens, err)
		}
	}
	return g, update, nil
}

// saveGoldens rewrites the golden file, keeping other checkpoints' entries.
func saveGoldens(e spec.Entry, mine map[string]string) error {
	all := map[string]string{}
	if b, err := os.ReadFile(e.Goldens); err == nil {
		_ = json.Unmarshal(b, &all)
	}
	for k, v := range mine {
		all[k] = v
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(e.Goldens), 0o755); err != nil {
		return err
	}
	return os.WriteFile(e.Goldens, append(b, '\n'), 0o644)
}

func casePrefix(id string) string {
	return strings.NewReplacer("/", "_", ".", "_").Replace(id)
}

func extension(w spec.Capability) string {
	if w == spec.TextToVideo {
		return ".mp4"
	}
	return ".png"
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func mustRead(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pct is the nearest-rank percentile p of xs.
func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
