// Package media inspects artifacts: container metadata, decoded frames and image metrics.
// It knows nothing about models; families state their criteria elsewhere.
package media

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os/exec"
	"strconv"

	"github.com/mediaqual/mediaqual/internal/procgroup"
)

// Probe is what ffprobe reports of a clip's first video stream, with frames counted by
// decoding.
type Probe struct {
	Codec     string
	PixFmt    string
	Width     int
	Height    int
	Frames    int     // decoded frame count
	FPS       big.Rat // r_frame_rate
	DurationS float64 // stream duration
}

// FFprobe runs ffprobe on path.
func FFprobe(ctx context.Context, path string) (Probe, error) {
	out, err := procgroup.Own(exec.CommandContext(ctx, "ffprobe", "-v", "error", "-select_streams", "v:0", "-count_frames",
		"-show_entries", "stream=codec_name,pix_fmt,width,height,r_frame_rate,nb_read_frames,duration",
		"-of", "json", path)).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return Probe{}, fmt.Errorf("ffprobe %s: %v: %s", path, err, bytes.TrimSpace(stderr))
	}
	var doc struct {
		Streams []struct {
			Codec    string `json:"codec_name"`
			PixFmt   string `json:"pix_fmt"`
			Width    int    `json:"width"`
			Height   int    `json:"height"`
			Rate     string `json:"r_frame_rate"`
			Frames   string `json:"nb_read_frames"`
			Duration string `json:"duration"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return Probe{}, fmt.Errorf("ffprobe %s: %w", path, err)
	}
	if len(doc.Streams) != 1 {
		return Probe{}, fmt.Errorf("ffprobe %s: no video stream", path)
	}
	s := doc.Streams[0]
	p := Probe{Codec: s.Codec, PixFmt: s.PixFmt, Width: s.Width, Height: s.Height}
	if p.Frames, err = strconv.Atoi(s.Frames); err != nil {
		return Probe{}, fmt.Errorf("ffprobe %s: frame count %q", path, s.Frames)
	}
	if _, ok := p.FPS.SetString(s.Rate); !ok {
		return Probe{}, fmt.Errorf("ffprobe %s: frame rate %q", path, s.Rate)
	}
	if p.DurationS, err = strconv.ParseFloat(s.Duration, 64); err != nil {
		return Probe{}, fmt.Errorf("ffprobe %s: duration %q", path, s.Duration)
	}
	return p, nil
}
