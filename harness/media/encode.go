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
	"sync"

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

// StreamContract starts the contract's encoder of a w×h clip at fps, its output discarded, fed
// as a server's Task feeds the encoder it started with the Task (spec.Request.Frames): stream
// queues the clip's next bytes and returns at once, one goroutine writes them to ffmpeg. It is
// for timing a Task as a server runs it, with x264 beside it on the same cores. stop ends the
// encoder wherever it is.
func StreamContract(ctx context.Context, w, h, fps int) (stream func(pix []byte), stop func(), err error) {
	args := append([]string{"-hide_banner", "-loglevel", "error", "-nostdin", "-f", "rawvideo", "-pix_fmt", "rgb24",
		"-s", fmt.Sprintf("%dx%d", w, h), "-framerate", strconv.Itoa(fps), "-i", "pipe:0", "-an"}, ContractX264...)
	cmd := procgroup.Own(exec.CommandContext(ctx, "ffmpeg", append(args, "-f", "null", "-")...))
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("the contract's encoder: %w", err)
	}
	queue := make(chan []byte, 1<<12) // a chunk a frame or more: far more than a clip has
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pix := range queue {
			if _, err := in.Write(pix); err != nil {
				break
			}
		}
		in.Close()
	}()
	var once sync.Once
	return func(pix []byte) { queue <- pix }, func() {
		once.Do(func() {
			close(queue)
			_ = cmd.Process.Kill() // a write in progress fails: nothing reads the pipe any more
			<-done
			_ = cmd.Wait()
		})
	}, nil
}
