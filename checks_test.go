package mediaqual_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/harness/client"
	"mediaqual/models"
)

// The suite's own checks (those outside harness/check) shown failing on broken inputs.

func TestReconcileCatchesUnbackedDeclarations(t *testing.T) {
	e, err := models.Lookup("ref-edit")
	require.NoError(t, err)
	good := client.Model{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}
	require.NoError(t, reconcile([]client.Model{good}, e))

	for name, tc := range map[string]struct {
		served []client.Model
		msg    string
	}{
		"unknown model":       {[]client.Model{good, {ID: "mystery", Capabilities: []string{"image_edit"}}}, "not in the inventory"},
		"claimed capability":  {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit", "text_to_video"}, Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "declares text_to_video"},
		"other revision":      {[]client.Model{{ID: "ref-edit", Capabilities: []string{"image_edit"}, Revision: "v0", Precision: e.Precision, Profile: e.Profile}}, "serves revision"},
		"not served":          {nil, "is not served"},
		"capability withheld": {[]client.Model{{ID: "ref-edit", Revision: e.Revision, Precision: e.Precision, Profile: e.Profile}}, "does not declare image_edit"},
	} {
		err := reconcile(tc.served, e)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "check reconcile:", name)
		assert.Contains(t, err.Error(), tc.msg, name)
	}
}

func TestGPUPreCheckSaysWhatToSet(t *testing.T) {
	e, err := models.Lookup("Wan-AI/Wan2.1-T2V-1.3B")
	require.NoError(t, err)
	t.Setenv("MEDIAQUAL_BUNDLES", "")
	t.Setenv("MEDIAQUAL_GPUS", "0")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_BUNDLES")

	root := t.TempDir()
	t.Setenv("MEDIAQUAL_BUNDLES", root)
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(root, e.Bundle))

	require.NoError(t, os.MkdirAll(filepath.Join(root, e.Bundle), 0o755))
	t.Setenv("MEDIAQUAL_GPUS", "")
	err = gpuPreCheck(e)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MEDIAQUAL_GPUS")
}
