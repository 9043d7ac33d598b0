package encode_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mediaqual/mediaqual/server/encode"
)

// argValue is the value after name in the encoder's argument list.
func argValue(t *testing.T, args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("the encoder's arguments have no %s: %v", name, args)
	return ""
}

// The docs state the encoder's settings and profile; they must be the ones MP4Args passes and
// ffprobe reads back, so they cannot drift from the code again (issue #28: the docs said
// `-preset medium -crf 18 -threads 4`, H.264 High, long after the code had changed).
func TestDocsStateTheEncoder(t *testing.T) {
	args := encode.MP4Args(64, 48, 16, "out.mp4")
	want := "-preset " + argValue(t, args, "-preset") + " -crf " + argValue(t, args, "-crf") +
		" -threads " + argValue(t, args, "-threads")

	path := filepath.Join(t.TempDir(), "clip.mp4")
	require.NoError(t, encode.MP4(context.Background(), path, video(t, 3, 64, 48), 16))
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=profile",
		"-of", "default=nw=1:nk=1", path).Output()
	require.NoError(t, err)
	assert.Equal(t, encode.Profile, strings.TrimSpace(string(out)), "ffprobe's profile of an encoded clip")

	settings := regexp.MustCompile("`(-preset [^`]*)`")
	profile := regexp.MustCompile(`H\.264 ([A-Z][A-Za-z]*(?: [A-Z][A-Za-z]*)*)`)
	stated := map[string]int{}
	for _, doc := range []string{"docs/API.md", "docs/GPU.md", "docs/DEVICE-KIT.md", "README.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		require.NoError(t, err)
		for _, m := range settings.FindAllStringSubmatch(string(b), -1) {
			assert.Equal(t, want, m[1], "%s states the encoder's settings", doc)
			stated["settings"]++
		}
		for _, m := range profile.FindAllStringSubmatch(string(b), -1) {
			assert.Equal(t, encode.Profile, m[1], "%s states the MP4's profile", doc)
			stated["profile"]++
		}
	}
	assert.Equal(t, map[string]int{"settings": 1, "profile": 2}, stated, "where the docs state the settings and the profile")
}
