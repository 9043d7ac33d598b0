package media

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/mediaqual/mediaqual/internal/procgroup"
	"github.com/mediaqual/mediaqual/models/spec"
)

// ContractX264 are the encoder settings mediaserve's contract states for every clip
// (docs/API.md: ffmpeg/libx264, preset ultrafast, CRF 18, 8 threads, yuv420p, bit-exact
// scaling), written here from the contract, not taken from the server, so that the suite's own
// encode of a clip's raw frames is a second opinion on what the server's encoder should give.
var ContractX264 = []string{"-c:v", "libx264", "-preset", "ultrafast", "-crf", "18", "-threads", "8",
	"-pix_fmt", "yuv420p", "-sws_flags", decodeSwsFlags}

// EncodeContract encodes v at fps with ContractX264 in dir and decodes the clip back: the
// frames a server that keeps the contract serves for v.
func EncodeContract(ctx context.Context, v spec.Video, fps int, dir string) ([]*image.RGBA, error) {
	f, err := os.CreateTemp(dir, "contract-*.mp4")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	if err := EncodeContractFile(ctx, v, fps, path); err != nil {
		return nil, err
	}
	return DecodeFrames(ctx, path)
}

// EncodeContractFile encodes v at fps with ContractX264 to the MP4 path.
func EncodeContractFile(ctx context.Context, v spec.Video, fps int, path string) error {
	if err := v.Check(); err != nil {
		return err
	}
	args := append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-f", "rawvideo", "-pix_fmt", "rgb24",
		"-s", fmt.Sprintf("%dx%d", v.W, v.H), "-framerate", strconv.Itoa(fps), "-i", "pipe:0", "-an"}, ContractX264...)
	cmd := procgroup.Own(exec.CommandContext(ctx, "ffmpeg", append(args, "-f", "mp4", "-y", filepath.Clean(path))...))
	cmd.Stdin = bytes.NewReader(v.Pix)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("encoding with the contract's x264 settings: %v: %s", err, out)
	}
	return nil
}
