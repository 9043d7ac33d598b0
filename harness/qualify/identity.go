package qualify

import (
	"errors"
	"fmt"

	"github.com/mediaqual/mediaqual/harness/check"
	"github.com/mediaqual/mediaqual/models/bundle"
	"github.com/mediaqual/mediaqual/models/spec"
)

// inProcessNative says whether the suite computes the native outputs itself: no mediaserve
// binary, and a row whose Task is Go code with no bundle (the reference families).
func (c *caseRun) inProcessNative() bool {
	return c.Config.Mediaserve == "" && c.Entry.NewTask != nil && c.Entry.Bundle == ""
}

// identity is the stage "identity": every served artifact equals the native artifact for the
// same inputs, bytes and decoded frames. Without a native path it does not run.
func (c *caseRun) identity(native nativeOutputs, a artifactSet) (string, error) {
	if len(a.Served) == 0 || a.Served[0].Path == "" {
		return "", errors.New("no served artifacts: the artifacts stage failed")
	}
	if len(native) == 0 {
		why := "no native path for " + c.Entry.ID + " here"
		if c.noNativePath() == "" { // there is one: the correctness stage says why it gave nothing
			why = "the correctness stage established no native outputs for " + c.Entry.ID
		}
		return "", notCompared{why + ": nothing to hold the served artifacts to"}
	}
	own := c.ownEncoder()
	for _, s := range a.Served {
		n, ok := native[s.item.key]
		if !ok {
			return "", fmt.Errorf("no native result for %s", s.item.key)
		}
		if same := c.sameAsNative(s.Path, s.SHA256, s.Decoded, n); same != nil {
			return "", fmt.Errorf("%s (request %s): %w", s.item.key, s.RequestID, same)
		}
	}
	msg := fmt.Sprintf("%d served artifacts byte-identical to the native path, decoded frames equal", len(a.Served))
	switch {
	case own:
		msg = fmt.Sprintf("%d served artifacts, encoded by the server's own encoder (%s), decode frame by frame to the native raw frames within the floors any encoder meets (%g dB in %dx%d box means, %g in %dx%d)",
			len(a.Served), c.Config.Target.Profile.Name, check.MinClipPSNR, check.ClipBox, check.ClipBox, check.MinCoarsePSNR, check.CoarseBox, check.CoarseBox)
	case len(native) > 0 && native[a.Served[0].item.key].Own:
		msg = fmt.Sprintf("%d served artifacts decode to the frames of the suite's own native path (its Task run here and encoded with the contract's settings; bytes not compared, the encoding being the suite's)", len(a.Served))
	}
	if l, err := c.layout(); err == nil && l != "" {
		// Both ran it (the server fails any result of another layout); others may differ.
		msg += fmt.Sprintf(", both under layout %s (another layout may give other bytes)", l)
	}
	return msg, nil
}

// noNativePath says why there is no native path here, "" when there is one: no mediaserve (and
// no Go Task the suite can run itself), or an endpoint's GPU row whose bundle is not on this machine.
func (c *caseRun) noNativePath() string {
	if c.Config.Mediaserve == "" && !c.inProcessNative() {
		return "Config.Mediaserve is empty"
	}
	if why := bundle.Missing(c.Entry); why != "" && c.Config.Target.External() {
		return why
	}
	return ""
}

// ownEncoder says whether the server's clips are made by an encoder of its own
// (wire.Profile.OwnEncoder), whose decoded frames cannot equal the native path's.
func (c *caseRun) ownEncoder() bool {
	return c.Config.Target.Profile.OwnEncoder && c.Entry.Workload == spec.TextToVideo
}

// sameAsNative holds a served artifact (its file, digest and decoded frames' digests) to the
// native output for the same inputs: the same bytes and frames; the same frames where the
// native artifact is the suite's own encode; within the floors any encoder meets, frame by
// frame against the native raw frames, for a server with an encoder of its own.
func (c *caseRun) sameAsNative(path, sha string, decoded []string, n nativeOutput) error {
	switch {
	case c.ownEncoder():
		frames, err := c.decodeAll(path)
		if err != nil {
			return err
		}
		w, h := n.Actual.Width, n.Actual.Height
		if w == 0 || h == 0 {
			w, h = frames[0].Rect.Dx(), frames[0].Rect.Dy()
		}
		return check.FramePSNR(n.Raw, w, h, frames)
	case n.Own:
		return check.FrameIdentity(decoded, n.Decoded)
	}
	return check.Identity(sha, n.SHA256, decoded, n.Decoded)
}
