package qualify

import (
	"errors"
	"fmt"

	"github.com/mediaqual/mediaqual/harness/check"
)

// identity is the stage "identity": every served artifact equals the native artifact for the
// same inputs, bytes and decoded frames. Without a native path it is not compared.
func (c *caseRun) identity(native nativeOutputs, a artifactSet) (string, error) {
	if len(a.Served) == 0 || a.Served[0].Path == "" {
		return "", errors.New("no served artifacts: the artifacts stage failed")
	}
	if len(native) == 0 {
		return "", notCompared{"no native path for " + c.Entry.ID + " here: nothing to hold the served artifacts to"}
	}
	for _, s := range a.Served {
		n, ok := native[s.item.key]
		if !ok {
			return "", fmt.Errorf("no native result for %s", s.item.key)
		}
		same := check.Identity(s.SHA256, n.SHA256, s.Decoded, n.Decoded)
		if n.Own {
			same = check.FrameIdentity(s.Decoded, n.Decoded)
		}
		if same != nil {
			return "", fmt.Errorf("%s (request %s): %w", s.item.key, s.RequestID, same)
		}
	}
	msg := fmt.Sprintf("%d served artifacts byte-identical to the native path, decoded frames equal", len(a.Served))
	if len(native) > 0 && native[a.Served[0].item.key].Own {
		msg = fmt.Sprintf("%d served artifacts decode to the frames of the suite's own native path (its Task run here and encoded with the contract's settings; bytes not compared, the encoding being the suite's)", len(a.Served))
	}
	if l, err := c.layout(); err == nil && l != "" {
		// Both ran it (the server fails any result of another layout); others may differ.
		msg += fmt.Sprintf(", both under layout %s (another layout may give other bytes)", l)
	}
	return msg, nil
}
