package reference

import "github.com/mediaqual/mediaqual/models/spec"

// goldens holds the digests of the reference Tasks' raw frames for the pinned fixtures; the
// suite refreshes it only when MEDIAQUAL_UPDATE_GOLDENS=1.
const goldens = "models/reference/testdata/goldens.json"

// overheadBudget: on the reference families serving adds encode (~0.1-0.3 s on a small CPU),
// up to one 100 ms poll interval and HTTP; 1.5 s leaves room for a slow CI machine while a
// stalled request still stands out.
const overheadBudget = 1500

// Entries are the reference families' inventory rows. They qualify the machinery, never a
// model: every report labels them reference/L0.
func Entries() []spec.Entry {
	t2v, edit, t2i := t2vCheckpoint(), editCheckpoint(), t2iCheckpoint()
	return []spec.Entry{
		{
			Checkpoint: t2v, Workload: spec.TextToVideo, NativeTask: "reference.t2vTask (Go, in-process)",
			Status: spec.Implemented, Fixtures: "t2v-prompts", Goldens: goldens, MaxOverheadMS: overheadBudget,
			Note: "reference/L0: procedural renderer that exercises the chain; not a model",
			// The renderer moves several shapes every frame; 2 levels is far below what it
			// produces and far above an encoder's noise on a frozen clip.
			Video: &spec.VideoContract{MinMotion: 2, MinStdDev: 8},
		},
		{
			Checkpoint: edit, Workload: spec.ImageEdit, NativeTask: "reference.editTask (Go, in-process)",
			Status: spec.Implemented, Fixtures: "edit-photos", Goldens: goldens, MaxOverheadMS: overheadBudget,
			Note: "reference/L0: deterministic instruction-driven editor; not a model",
			Edit: &spec.EditContract{MinChange: 4},
			// Its edits are fixed transforms of the reference: no seed enters them.
			SeedFree: true,
		},
		{
			Checkpoint: t2i, Workload: spec.ImageEdit, NativeTask: "reference.t2iTask (Go, in-process)",
			Status: spec.CapabilityGap, Fixtures: "edit-photos", Goldens: goldens, MaxOverheadMS: overheadBudget,
			Note:      "reference/L0 negative control: declares image_edit but ignores the reference image",
			Edit:      &spec.EditContract{MinChange: 4},
			ExpectGap: spec.GapIgnoresReference,
		},
	}
}
