package peers_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/harness/jobmodel"
	"github.com/mediaqual/mediaqual/harness/peers"
	"github.com/mediaqual/mediaqual/harness/wire"
)

// TestDeparturesHoldToReleasedSource: each rule of the job API's model a peer's profile says
// its released code breaks is a rule of the model, and the line of source that breaks it is in
// the installed package.
func TestDeparturesHoldToReleasedSource(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	python, err := peers.Python(root)
	require.NoError(t, err)
	out, err := exec.Command(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	require.NoError(t, err)
	site := strings.TrimSpace(string(out))
	for _, p := range []wire.Profile{wire.SGLang, wire.VLLMOmni} {
		for check, d := range p.Departs {
			ruled := false
			for _, r := range jobmodel.Rules {
				ruled = ruled || r.Check == check
			}
			assert.True(t, ruled, "%s departs from %s, which is no rule of the model", p.Name, check)
			b, err := os.ReadFile(filepath.Join(site, d.File))
			require.NoError(t, err, "%s's departure from %s cites %s", p.Name, check, d.File)
			assert.Contains(t, string(b), d.Source, "%s's departure from %s", p.Name, check)
		}
	}
}
