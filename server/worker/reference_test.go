package worker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"mediaqual/models/pyworker"
	"mediaqual/models/spec"
)

// The raw reference a worker gets instead of the upload must be the very pixels Pillow's
// convert("RGB") makes of that upload, kind by kind; where they could differ (JPEG, 16-bit
// PNG, a translucent premultiplied image) the upload goes as it came.
func TestRawReferenceIsWhatPillowDecodes(t *testing.T) {
	py := pyworker.TorchPython(t)
	dir := t.TempDir()
	pillow := func(p string) string {
		out, err := exec.Command(py, "-c", `import hashlib, sys
from PIL import Image
print(hashlib.sha256(Image.open(sys.argv[1]).convert("RGB").tobytes()).hexdigest())`, p).Output()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	rgba := image.NewNRGBA(image.Rect(0, 0, 7, 5))
	gray := image.NewGray(image.Rect(0, 0, 6, 4))
	pal := image.NewPaletted(image.Rect(0, 0, 5, 3), color.Palette{color.NRGBA{10, 20, 30, 255}, color.NRGBA{200, 100, 50, 0}, color.NRGBA{1, 2, 3, 128}})
	opaque := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(i * 37)
	}
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 11)
	}
	for i := range pal.Pix {
		pal.Pix[i] = uint8(i % 3)
	}
	for i := range opaque.Pix {
		opaque.Pix[i] = uint8(i*13) | map[bool]uint8{true: 0xff}[i%4 == 3]
	}
	uploads := map[string][]byte{}
	for name, img := range map[string]image.Image{"nrgba": rgba, "gray": gray, "paletted": pal, "rgb": opaque} {
		var b bytes.Buffer
		require.NoError(t, png.Encode(&b, img))
		uploads[name] = b.Bytes()
	}
	for _, name := range []string{"astronaut.png", "rocket.png"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "images", name))
		require.NoError(t, err)
		uploads[name] = b
	}
	for name, upload := range uploads {
		img, _, err := image.Decode(bytes.NewReader(upload))
		require.NoError(t, err, name)
		raw := rawReference(spec.Request{Reference: img, ReferenceFile: upload})
		require.NotNil(t, raw, "%s: an 8-bit PNG goes raw", name)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, upload, 0o644))
		sum := sha256.Sum256(raw)
		assert.Equal(t, pillow(p), hex.EncodeToString(sum[:]), "%s: the raw pixels are not Pillow's", name)
	}

	// Not raw: a JPEG, a 16-bit PNG, a translucent premultiplied image.
	var j, deep bytes.Buffer
	require.NoError(t, jpeg.Encode(&j, opaque, nil))
	require.NoError(t, png.Encode(&deep, image.NewRGBA64(image.Rect(0, 0, 2, 2))))
	for name, upload := range map[string][]byte{"jpeg": j.Bytes(), "png16": deep.Bytes()} {
		img, _, err := image.Decode(bytes.NewReader(upload))
		require.NoError(t, err, name)
		assert.Nil(t, rawReference(spec.Request{Reference: img, ReferenceFile: upload}), name)
	}
	translucent := image.NewRGBA(image.Rect(0, 0, 2, 2))
	assert.Nil(t, rawReference(spec.Request{Reference: translucent}), "premultiplied colour at alpha 0")

	// And the check can fail: pixels off by one level are told apart.
	img, _, err := image.Decode(bytes.NewReader(uploads["gray"]))
	require.NoError(t, err)
	raw := rawReference(spec.Request{Reference: img})
	raw[0]++
	sum := sha256.Sum256(raw)
	assert.NotEqual(t, pillow(filepath.Join(dir, "gray")), hex.EncodeToString(sum[:]))
}
