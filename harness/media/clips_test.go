package media

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clip describes a test clip made with the ffmpeg CLI from lavfi's testsrc2.
type clip struct {
	name          string
	w, h, fps, n  int
	codec         string   // expected stsd fourcc
	args          []string // encoder and muxer arguments
	vfr           bool     // frame 3 dropped with variable-rate output
	audioFirst    bool     // an AAC track precedes the video track
	wantKeyframes int      // 0: don't check
}

var clips = []clip{
	{name: "x264-64x48-8fps-1f", w: 64, h: 48, fps: 8, n: 1, codec: "avc1",
		args: []string{"-c:v", "libx264", "-pix_fmt", "yuv420p"}},
	{name: "x264-320x192-16fps-17f-faststart", w: 320, h: 192, fps: 16, n: 17, codec: "avc1",
		args: []string{"-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart"}},
	{name: "mpeg4-832x480-24fps-49f", w: 832, h: 480, fps: 24, n: 49, codec: "mp4v",
		args: []string{"-c:v", "mpeg4", "-q:v", "5"}},
	{name: "x264-1280x704-30fps-5f-faststart-ts30000", w: 1280, h: 704, fps: 30, n: 5, codec: "avc1",
		args: []string{"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-video_track_timescale", "30000"}},
	{name: "mpeg4-320x192-25fps-121f-gop10", w: 320, h: 192, fps: 25, n: 121, codec: "mp4v", wantKeyframes: 13,
		args: []string{"-c:v", "mpeg4", "-g", "10", "-q:v", "5"}},
	{name: "x264-320x192-16fps-17f-fragmented", w: 320, h: 192, fps: 16, n: 17, codec: "avc1", wantKeyframes: 3,
		args: []string{"-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "8", "-movflags", "frag_keyframe+empty_moov"}},
	{name: "x264-160x96-12fps-30f-fragmented-moov-samples", w: 160, h: 96, fps: 12, n: 30, codec: "avc1", wantKeyframes: 3,
		args: []string{"-c:v", "libx264", "-pix_fmt", "yuv420p", "-g", "12", "-movflags", "frag_keyframe"}},
	{name: "hevc-64x48-24fps-5f-audio-first", w: 64, h: 48, fps: 24, n: 5, codec: "hvc1", audioFirst: true,
		args: []string{"-c:v", "libx265", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-c:a", "aac"}},
	{name: "x264-160x96-10fps-9f-vfr", w: 160, h: 96, fps: 10, n: 9, codec: "avc1", vfr: true,
		args: []string{"-c:v", "libx264", "-pix_fmt", "yuv420p", "-fps_mode", "vfr"}},
}

// clipsNamed picks clips by name.
func clipsNamed(names ...string) []clip {
	var out []clip
	for _, n := range names {
		i := slices.IndexFunc(clips, func(c clip) bool { return c.name == n })
		if i < 0 {
			panic("no clip " + n)
		}
		out = append(out, clips[i])
	}
	return out
}

// make encodes the clip into dir and returns its path.
func (c clip) make(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(dir, c.name+".mp4")
	args := []string{"-v", "error", "-nostdin", "-y", "-threads", "1",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=%d", c.w, c.h, c.fps)}
	if c.audioFirst {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=44100", "-t", "1", "-map", "1:a", "-map", "0:v")
	}
	if c.vfr {
		args = append(args, "-vf", `select=not(eq(n\,3))`)
	}
	args = append(args, "-frames:v", fmt.Sprint(c.n))
	args = append(args, c.args...)
	args = append(args, out)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := exec.CommandContext(ctx, "ffmpeg", args...).CombinedOutput()
	require.NoError(t, err, "ffmpeg %s: %s", strings.Join(args, " "), b)
	return out
}

// ffprobeKeyframes counts the video packets ffprobe flags as keyframes.
func ffprobeKeyframes(t testing.TB, path string) int {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-select_streams", "v:0",
		"-show_entries", "packet=flags", "-of", "csv=p=0", path).Output()
	require.NoError(t, err)
	k := 0
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "K") {
			k++
		}
	}
	return k
}

func requireFFmpeg(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"ffmpeg", "ffprobe"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// ffmpeg runs the ffmpeg CLI quietly, failing the test on error, and returns stderr.
func ffmpeg(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append([]string{"-hide_banner", "-nostdin", "-y", "-threads", "1"}, args...)
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, "ffmpeg", args...)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "ffmpeg %s: %s", strings.Join(args, " "), stderr.String())
	return stderr.String()
}
