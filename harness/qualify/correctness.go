package qualify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mediaqual/mediaqual/fixtures"
	"github.com/mediaqual/mediaqual/harness/api"
	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/harness/media"
	"github.com/mediaqual/mediaqual/internal/procgroup"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

// workItem is one pinned input: the request fields and, for image_edit, the reference sent.
type workItem struct {
	key    string
	fields map[string]string
	ref    []byte
	image  string        // an edit's fixture image (fixtures.Image), for the shape probe's other aspect
	asked  api.Settings  // the settings the fields ask for, as the actual-settings check reads them
	st     spec.Settings // the same, as the in-process native path runs them
}

// nativeOutputs is what the correctness stage established: the native path's output for each pinned
// input, by input key. Empty when there is no native path here.
type nativeOutputs map[string]nativeOutput

// nativeOutput is one input's native-path artifact.
type nativeOutput struct {
	Path, SHA256, FramesSHA256 string
	Raw                        string     // the raw rgb24 frames the artifact was encoded from
	Decoded                    []string   // digests of the decoded frames (or image)
	Actual                     api.Actual // what the Task reports it ran (engine and layout included)
	// Own says the artifact was encoded by the suite itself (the in-process native path), so
	// its bytes are not the server's to match: identity compares decoded frames alone.
	Own bool
	// TaskMS is the native Task's own wall time, the timing stage's second source for the
	// server's; 0 where the native path did not time it.
	TaskMS float64
}

// items are the row's pinned inputs: its fixture set at its pinned settings, built once.
func (c *caseRun) items() ([]workItem, error) {
	if c.inputs != nil || c.inputsErr != nil {
		return c.inputs, c.inputsErr
	}
	c.inputs, c.inputsErr = c.loadItems()
	return c.inputs, c.inputsErr
}

func (c *caseRun) loadItems() ([]workItem, error) {
	e := c.Entry
	set, err := fixtures.Load(e.Fixtures)
	if err != nil {
		return nil, err
	}
	c.Row.Dataset = map[string]string{}
	for f, d := range set.Files {
		c.Row.Dataset[f] = d[:16]
	}
	var out []workItem
	for i, p := range set.Prompts {
		s := e.Defaults
		s.Prompt = p.Text
		out = append(out, workItem{key: fmt.Sprintf("prompt-%d", i), fields: s.Fields(e.Controls, e.Workload), asked: asked(e, s), st: s})
	}
	for _, ed := range set.Edits {
		s := e.Defaults
		s.Prompt = ed.Instruction
		ref, err := fixtures.Image(ed.Image, s.Size.W, s.Size.H)
		if err != nil {
			return nil, err
		}
		c.Row.Dataset["sent:"+ed.Name] = digest(ref)[:16]
		out = append(out, workItem{key: ed.Name, fields: s.Fields(e.Controls, e.Workload), ref: ref, image: ed.Image, asked: asked(e, s), st: s})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("fixture set %s has no inputs for %s", e.Fixtures, e.Workload)
	}
	return out, nil
}

// asked is what a request at settings s asks of e's server: an image edit asks no frame
// count or rate, so a server that reports one reports a setting it was never asked about.
func asked(e spec.Entry, s spec.Settings) api.Settings {
	w := check.WireSettings(s)
	if e.Workload != spec.TextToVideo {
		w.NumFrames, w.FPS = 0, 0
	}
	return w
}

// correctness is the stage "correctness": the family's native path on every pinned input and
// the family's criteria there, before any server is involved; the goldens; the bundle's
// reference outputs; the bundle's digest against a published run of the same revision.
func (c *caseRun) correctness(b bundleFacts) (nativeOutputs, string, error) {
	items, err := c.items()
	if err != nil {
		return nil, "", err
	}
	inProcess := c.inProcessNative()
	if why := c.noNativePath(); why != "" {
		return nil, "", notCompared{"no native path here: " + why + "; " + c.servedAgainstReferences()}
	}
	bundleHashed := func() (string, error) { return "", nil }
	switch {
	case inProcess:
		c.Row.Bundle = map[string]string{"served": "in-process " + c.Entry.NativeTask + ", built into the suite", "native": "the suite's own build of the family (no mediaserve here)"}
	case c.Entry.Bundle == "":
		// The reference families are compiled into mediaserve, so the binary is the bundle.
		sum := sha256.New()
		bin, err := os.ReadFile(c.Config.Mediaserve)
		if err != nil {
			return nil, "", fmt.Errorf("the mediaserve binary, which is this row's bundle: %w", err)
		}
		sum.Write(bin)
		c.Row.Bundle = map[string]string{"served": "mediaserve " + c.Entry.ID + "@" + c.Entry.Revision, "sha256": hex.EncodeToString(sum.Sum(nil))[:16]}
	default:
		dir := bundle.Dir(c.Entry)
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
			c.Row.Bundle = map[string]string{"served": dir, "sha256": d.sum[:16], "files": strconv.Itoa(d.n)}
			if b.Commit != "" {
				c.Row.Bundle["revision"] = b.Commit
			}
			return c.publishedDigest(b, d.sum)
		}
		if out, err := toolOutput(c.ctx, "python3", "-c", "import torch, diffusers; print(torch.__version__, diffusers.__version__)"); err == nil {
			if f := strings.Fields(out); len(f) == 2 {
				c.Row.Versions = map[string]string{"torch": f[0], "diffusers": f[1]}
			}
		}
	}

	goldens, update, err := c.loadGoldens()
	if err != nil {
		return nil, "", err
	}
	// Every input runs natively even after one fails a check, so identity has a native
	// counterpart for each and the message lists every failure.
	run := c.runNative
	if inProcess {
		run = c.runInProcess
	}
	// The shape probe's inputs too, so that the aiperf stage holds its served outputs to the
	// native path's (probe-identity); the family's criteria are for the pinned inputs.
	probes, _, err := c.probeItems()
	if err != nil {
		return nil, "", err
	}
	native, err := run(append(slices.Clip(items), probes...))
	digestNote, herr := bundleHashed()
	if herr != nil {
		return nil, "", herr
	}
	if err != nil {
		return nil, "", err
	}
	refs := c.referenceOutputs()
	written, err := refs.write(native, c.Entry.Workload, c.Config.WriteReferenceOutputs)
	if err != nil {
		return nil, "", err
	}
	defer func() {
		if refs != nil && len(refs.ssim) > 0 {
			c.Row.ReferenceSSIM = refs.ssim
		}
	}()
	failed := nativeActual(items, native)
	for _, it := range items {
		n := native[it.key]
		frames, err := c.validate(n.Path, it)
		if err != nil {
			failed = append(failed, fmt.Errorf("native %s: %w", it.key, err))
		}
		if n.Decoded, err = c.frameDigests(n.Path, frames); err != nil {
			return nil, "", fmt.Errorf("native %s: %w", it.key, err)
		}
		native[it.key] = n
		if goldens != nil {
			if err := check.Golden(goldens, update, c.Entry.ID+"/"+it.key, n.FramesSHA256, c.Entry.Goldens); err != nil {
				failed = append(failed, err)
			}
		}
		if err := refs.compare(c.ctx, it.key, frames, c.Entry.Workload); err != nil {
			failed = append(failed, fmt.Errorf("native %s: %w", it.key, err))
		}
	}
	if len(failed) > 0 {
		return native, "", errors.Join(failed...)
	}
	if update {
		if err := c.saveGoldens(goldens); err != nil {
			return native, "", err
		}
	}
	summary := fmt.Sprintf("%d native outputs valid under the family contract", len(items))
	if inProcess {
		summary = fmt.Sprintf("%d native outputs, computed by the suite itself (%s; no mediaserve here, so encoded with the contract's settings), valid under the family contract", len(items), c.Entry.NativeTask)
	}
	if goldens != nil {
		summary += " and equal to the goldens"
	}
	if written > 0 {
		summary += fmt.Sprintf("; wrote %d reference outputs to %s (%s=1): compared from the next run on", written, refs.dir, EnvWriteReferenceOutputs)
	} else if refs != nil {
		summary += "; " + refs.summary(native)
	}
	if c.Entry.Bundle != "" {
		// The native path and the server share the pipeline: a broken one agrees with itself,
		// and the family's criteria are coarse. Only outputs another pipeline made hold it;
		// outputs this suite wrote (this run or an earlier one) are a regression baseline.
		if why := refs.capWhy(); why != "" {
			c.limit(spec.FamilyValidated, why)
		}
	}
	return native, summary + digestNote, nil
}

// nativeActual is the check "actual-settings" on every native record: what the Task reports
// it ran against what the input asked.
func nativeActual(items []workItem, native nativeOutputs) []error {
	var failed []error
	for _, it := range items {
		if err := check.Settings(it.asked, native[it.key].Actual); err != nil {
			failed = append(failed, fmt.Errorf("native %s: %w", it.key, err))
		}
	}
	return failed
}

// runNative runs every input on the native path in one `mediaserve task -batch` process, so
// the weights load once, and reads back each job's record.
func (c *caseRun) runNative(items []workItem) (nativeOutputs, error) {
	var batch bytes.Buffer
	enc := json.NewEncoder(&batch)
	for _, it := range items {
		dir := filepath.Join(c.Dir, "native", it.key)
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
	batchPath := filepath.Join(c.Dir, "native", "batch.jsonl")
	if err := os.WriteFile(batchPath, batch.Bytes(), 0o644); err != nil {
		return nil, err
	}
	timeout, _, err := bundle.LoadTimeout(c.Entry)
	if err != nil {
		return nil, err
	}
	layout, err := c.layout()
	if err != nil {
		return nil, err
	}
	cmd := procgroup.Own(exec.CommandContext(c.ctx, c.Config.Mediaserve, "task", "-model", c.Entry.ID, "-capability", string(c.Entry.Workload),
		"-batch", batchPath, "-load-timeout", timeout.String(), "-raw", "-engine", c.Config.Engine, "-layout", string(layout)))
	cmd.Env = append(os.Environ(), c.rootEnv())
	if c.Config.GPUs != "" && !c.Config.Target.External() {
		// The GPUs the launched server gets: the layout was chosen for them.
		cmd.Env = append(cmd.Env, "CUDA_VISIBLE_DEVICES="+c.Config.GPUs)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("native path: %v\n%s", err, out)
	}
	res := nativeOutputs{}
	for _, it := range items {
		var rec struct {
			TaskWallMS float64 `json:"task_call_wall_ms"`
			Product    struct {
				Path         string     `json:"path"`
				SHA256       string     `json:"sha256"`
				FramesSHA256 string     `json:"frames_sha256"`
				Actual       api.Actual `json:"actual"`
			} `json:"product"`
		}
		b, err := os.ReadFile(filepath.Join(c.Dir, "native", it.key, "actual.json"))
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err != nil {
			return nil, fmt.Errorf("native path %s: reading actual.json: %w", it.key, err)
		}
		res[it.key] = nativeOutput{Path: rec.Product.Path, SHA256: rec.Product.SHA256, FramesSHA256: rec.Product.FramesSHA256,
			Raw: filepath.Join(c.Dir, "native", it.key, "frames.rgb"), Actual: rec.Product.Actual, TaskMS: rec.TaskWallMS}
	}
	return res, nil
}

// runInProcess is the native path of a family built into the suite (the reference families,
// whose Tasks are Go), for when no mediaserve binary is at hand: each pinned input run through
// the family's Task here, its raw frames kept and digested as mediaserve digests them, and
// encoded by the suite with the contract's settings (an edit as PNG), so that the served
// artifacts are held to the frames, the goldens and the encoder's quality all the same.
func (c *caseRun) runInProcess(items []workItem) (nativeOutputs, error) {
	task, err := c.Entry.NewTask()
	if err != nil {
		return nil, fmt.Errorf("the in-process native path of %s: %w", c.Entry.ID, err)
	}
	res := nativeOutputs{}
	for _, it := range items {
		dir := filepath.Join(c.Dir, "native", it.key)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		st := it.st
		req := spec.Request{Settings: st}
		if it.ref != nil {
			img, err := media.DecodeImageBytes(it.ref)
			if err != nil {
				return nil, err
			}
			req.Reference, req.ReferenceFile = img, it.ref
		}
		start := time.Now()
		out, err := task.Run(c.ctx, req)
		wall := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("native path %s: %w", it.key, err)
		}
		v, err := out.Pixels()
		if err != nil {
			return nil, fmt.Errorf("native path %s: %w", it.key, err)
		}
		n := nativeOutput{Raw: filepath.Join(dir, "frames.rgb"), Own: true, TaskMS: ms(wall)}
		// Read through the documented shape, as a `mediaserve task` record is (actual.json).
		b, err := json.Marshal(out.Actual)
		if err == nil {
			err = json.Unmarshal(b, &n.Actual)
		}
		if err != nil {
			return nil, fmt.Errorf("native path %s: its actual: %w", it.key, err)
		}
		if err := os.WriteFile(n.Raw, v.Pix, 0o644); err != nil {
			return nil, err
		}
		sum := sha256.New()
		for i := range v.N {
			sum.Write(v.RGBA(i).Pix) // mediaserve's frames_sha256: the frames as RGBA, in order
		}
		n.FramesSHA256 = hex.EncodeToString(sum.Sum(nil))
		n.Path = filepath.Join(dir, "artifact"+extension(c.Entry.Workload))
		if c.Entry.Workload == spec.TextToVideo {
			err = media.EncodeContractFile(c.ctx, v, st.FPS, n.Path)
		} else {
			var b bytes.Buffer
			if err = png.Encode(&b, v.RGBA(0)); err == nil {
				err = os.WriteFile(n.Path, b.Bytes(), 0o644)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("native path %s: %w", it.key, err)
		}
		if n.SHA256, err = media.FileSHA256(n.Path); err != nil {
			return nil, err
		}
		res[it.key] = n
	}
	return res, nil
}

// layout is the -layout the native path and a launched mediaserve both run with: the row's
// choice (spec.ChooseLayout) of MEDIAQUAL_LAYOUT on MEDIAQUAL_GPUS, resolved here once so the
// two cannot choose apart. "" for a row without layouts, and for an external endpoint, whose
// layout is its own.
func (c *caseRun) layout() (spec.Layout, error) {
	if len(c.Entry.Layouts) == 0 || c.Config.Target.External() {
		return "", nil
	}
	return c.Entry.ChooseLayout(c.Config.Layout, c.Config.GPUs)
}

// rootEnv tells mediaserve where the module is, so a family's worker script is found whatever
// directory the server runs in.
func (c *caseRun) rootEnv() string { return "MEDIAQUAL_ROOT=" + c.Config.Root }

// validate applies every artifact check to a file: container shape, decoded frames and the
// family's validity contract. It returns the decoded frames (an image is one frame), nil when
// a check failed before decoding.
func (c *caseRun) validate(path string, it workItem) ([]*image.RGBA, error) {
	e := c.Entry
	want := e.Defaults
	if e.Workload == spec.TextToVideo {
		info, err := media.ReadMP4File(path)
		if err != nil {
			return nil, check.Fail("container", "%w", err)
		}
		if err := check.Clip(info, want); err != nil {
			return nil, err
		}
		p, err := c.ffprobe(path)
		if err != nil {
			return nil, check.Fail("decodable", "%w", err)
		}
		if err := check.Decoded(p, want); err != nil {
			return nil, err
		}
		frames, err := c.decodeClip(path)
		if err != nil {
			return nil, check.Fail("decodable", "%w", err)
		}
		if len(frames) != want.NumFrames {
			return frames, check.Fail("decoded-frames", "decoded %d frames, asked %d", len(frames), want.NumFrames)
		}
		_, err = check.Motion(frames, *e.Video)
		return frames, err
	}
	out, err := media.DecodeImage(path)
	if err != nil {
		return nil, check.Fail("decodable", "%w", err)
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
func (c *caseRun) frameDigests(path string, frames []*image.RGBA) ([]string, error) {
	if frames == nil {
		var err error
		if frames, err = c.decodeAll(path); err != nil {
			return nil, err
		}
	}
	return media.FrameDigests(frames), nil
}

// clip is what the case learned of one clip's bytes, whatever its file's name: a run holds
// many copies of one clip (a served artifact and the native path's, a warmup and its measured
// twin), and the same bytes probe and decode the same.
type clip struct {
	probe  *media.Probe
	frames []*image.RGBA // shared: read only
}

// clipOf is path's entry in the case's clips, by its bytes' digest, and that digest.
func (c *caseRun) clipOf(path string) (clip, [sha256.Size]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return clip{}, [sha256.Size]byte{}, err
	}
	sum := sha256.Sum256(b)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clips[sum], sum, nil
}

func (c *caseRun) keepClip(sum [sha256.Size]byte, update func(*clip)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clips == nil {
		c.clips = map[[sha256.Size]byte]clip{}
	}
	k := c.clips[sum]
	update(&k)
	c.clips[sum] = k
}

// ffprobe is ffprobe's account of a clip, probed once for the case (clip).
func (c *caseRun) ffprobe(path string) (media.Probe, error) {
	k, sum, err := c.clipOf(path)
	switch {
	case err != nil:
		return media.Probe{}, err
	case k.probe != nil:
		return *k.probe, nil
	}
	p, err := media.FFprobe(c.ctx, path)
	if err != nil {
		return p, err
	}
	c.keepClip(sum, func(k *clip) { k.probe = &p })
	return p, nil
}

// decodeClip is a clip's decoded frames, decoded once for the case (clip).
func (c *caseRun) decodeClip(path string) ([]*image.RGBA, error) {
	k, sum, err := c.clipOf(path)
	if err != nil || k.frames != nil {
		return k.frames, err
	}
	frames, err := media.DecodeFrames(c.ctx, path)
	if err != nil {
		return nil, err
	}
	c.keepClip(sum, func(k *clip) { k.frames = frames })
	return frames, nil
}

// decodeAll decodes a clip's frames (decodeClip), or an image as one frame.
func (c *caseRun) decodeAll(path string) ([]*image.RGBA, error) {
	if c.Entry.Workload == spec.TextToVideo {
		return c.decodeClip(path)
	}
	return decodeAll(c.ctx, path, c.Entry.Workload)
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

func (c *caseRun) loadGoldens() (map[string]string, bool, error) {
	e := c.Entry
	if e.Goldens == "" {
		return nil, false, nil
	}
	update := c.Config.UpdateGoldens
	g := map[string]string{}
	b, err := os.ReadFile(c.path(e.Goldens))
	switch {
	case errors.Is(err, os.ErrNotExist) && update:
	case err != nil:
		return nil, false, check.Fail("golden", "%w", err)
	default:
		if err := json.Unmarshal(b, &g); err != nil {
			return nil, false, check.Fail("golden", "%s: %w", e.Goldens, err)
		}
	}
	return g, update, nil
}

// saveGoldens rewrites the golden file, keeping other checkpoints' entries: a file it cannot
// read or parse is refused, not replaced by this row's entries alone.
func (c *caseRun) saveGoldens(mine map[string]string) error {
	file := c.path(c.Entry.Goldens)
	all := map[string]string{}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return check.Fail("golden", "%w", err)
	default:
		if err := json.Unmarshal(b, &all); err != nil {
			return check.Fail("golden", "%s is not a goldens file, not rewritten: %w", c.Entry.Goldens, err)
		}
	}
	for k, v := range mine {
		all[k] = v
	}
	b, err = json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, append(b, '\n'), 0o644)
}

// path resolves a path the inventory gives relative to the module root.
func (c *caseRun) path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.Config.Root, p)
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
