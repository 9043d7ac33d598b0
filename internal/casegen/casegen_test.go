package casegen

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTestNameSelectsExactlyOneCheckpoint(t *testing.T) {
	assert.Equal(t, "TestWan2_1_T2V_1_3B", TestName("Wan-AI/Wan2.1-T2V-1.3B"))
	assert.Equal(t, "TestRef_t2v", TestName("ref-t2v"))
	wan21 := regexp.MustCompile("Wan2.1")
	assert.True(t, wan21.MatchString(TestName("Wan-AI/Wan2.1-T2V-1.3B")))
	assert.False(t, wan21.MatchString(TestName("Wan-AI/Wan2.2-TI2V-5B")))
}

func TestFilesSplitByGPUNeed(t *testing.T) {
	files, err := Files()
	assert.NoError(t, err)
	assert.Contains(t, string(files["cases_gpu_test.go"]), "//go:build gpu")
	assert.Contains(t, string(files["cases_gpu_test.go"]), `qualify(t, "Wan-AI/Wan2.1-T2V-1.3B")`)
	assert.Contains(t, string(files["cases_nogpu_test.go"]), `needsGPUTag(t, "Wan-AI/Wan2.1-T2V-1.3B")`)
	assert.Contains(t, string(files["cases_test.go"]), `qualify(t, "ref-t2v")`)
	assert.NotContains(t, string(files["cases_test.go"]), "Wan2.1")
}

func TestListShowsEveryCaseWithStagesAndCommand(t *testing.T) {
	var b strings.Builder
	List(&b)
	out := b.String()
	assert.Contains(t, out, "TestRef_edit/influence")
	assert.Contains(t, out, "TestRef_t2v/aiperf")
	assert.NotContains(t, out, "TestRef_t2v/influence")
	assert.Contains(t, out, "run: go test -count=1 -run '^TestRef_t2v$' .")
	assert.Contains(t, out, "-tags gpu -count=1 -run '^TestWan2_1_T2V_1_3B$' .")
	assert.Contains(t, out, "TestCosmos3_Nano/inventory\n  run:")
}

// The report names the command a user ran, not the temporary binary go test built.
func TestRunCommandNamesWhatTheUserRan(t *testing.T) {
	bin := "/tmp/go-build1234/b001/mediaqual.test"
	assert.Equal(t, "go test -count 1 -timeout 30m0s -skip 'TestFaultsAreCaught|TestInterrupted' .",
		RunCommand([]string{bin, "-test.paniconexit0", "-test.count=1", "-test.timeout=30m0s",
			"-test.skip=TestFaultsAreCaught|TestInterrupted", "-test.v=test2json"}, ""))
	assert.Equal(t, "go test -tags gpu -v -run '^TestWan2_1_T2V_1_3B$' .",
		RunCommand([]string{bin, "-test.v=true", "-test.run=^TestWan2_1_T2V_1_3B$"}, "gpu"))
	assert.Equal(t, "./qual.test -test.run 'Wan2.1 x'", RunCommand([]string{"./qual.test", "-test.run", "Wan2.1 x"}, "gpu"),
		"a binary run by hand is named as it ran")
	assert.Equal(t, `a 'it'\''s'`, shellJoin([]string{"a", "it's"}))
}
