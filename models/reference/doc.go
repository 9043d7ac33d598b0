// Package reference provides the built-in reference families: small deterministic Go generators
// that run on a CPU in seconds. They let the server, the probes and the qualification suite be
// exercised end to end without weights or an accelerator. Every checkpoint here is labelled
// Profile "reference/L0" and is never a real model; its numbers say nothing about model quality.
//
// The three checkpoints:
//
//   - ref-t2v (text_to_video): a procedural renderer. A stable hash of prompt and seed
//     (FNV-1a 64 mixed with the seed) picks a palette, a background gradient with drifting
//     bands, and a few circles and rectangles moving along smooth paths in time t = frame/fps;
//     one shape orbits once per clip, so frame count and fps change every frame after the
//     first. Each frame starts as seeded noise and each step is a full-clip pass that removes
//     two thirds of the remaining noise; shape edges are sharper with more steps (edge width
//     0.75+6/steps px). guidance_scale sets colour saturation (factor guidance/5: 0 is grey,
//     5 neutral, 20 four times as saturated).
//   - ref-edit (image_edit): an instruction-driven editor that really transforms the
//     reference. Geometric operations are applied to the reference, which is then resized to
//     the requested size (Catmull-Rom); colour operations follow at that size. guidance_scale
//     scales the colour operations: 0 leaves the (rotated, flipped, resized) reference, 1 is
//     the nominal edit, above 1 extrapolates past it (clamped). Steps apply the edit
//     progressively, strength 1-(1-s/N)² after step s of N, each step a full-image pass that
//     requantises to 8 bits with a seeded dither (±0.5 level) and carries the rounding error
//     into the next pass; the result is the full edit to within 2 levels, and its low bits
//     depend on seed and steps.
//   - ref-t2i (claims image_edit): renders one image from prompt and seed exactly like frame 0
//     of ref-t2v and ignores the reference on purpose. It is the negative control that a
//     reference-influence probe must flag. Its guidance_scale is the saturation factor itself
//     (its default 1 is neutral), so guidance g here matches ref-t2v's 5g.
//
// Edit vocabulary, matched case-insensitively on word starts (so "blurred", "rotated",
// "mirrored", "inverted", "tinted" count), applied in the order the words appear:
//
//	grayscale | greyscale      luma (Rec. 601) in every channel
//	invert                     255 - v
//	sepia                      the classic sepia matrix
//	rotate [by] [90|180|270]   clockwise; "rotate" alone is 90; a following
//	                           "counterclockwise"/"anticlockwise"/"ccw" reverses it
//	mirror                     horizontal flip (left-right)
//	flip                       vertical flip (top-bottom); "flip horizontally" mirrors
//	blur                       two box-blur passes of radius max(2, min(W,H)/64)
//	posterize | posterise      4 levels per channel
//	tint <colour>              65% image + 35% colour; colour one of red, green, blue,
//	                           yellow, cyan, magenta, orange, purple
//
// An angle, direction or colour counts within the four words after its vocabulary word and
// before the next one, so "rotate the image by 180 degrees" and "tint it red" work.
//
// A prompt without any of these words fails with *spec.Error code "unsupported_instruction";
// so does a rotation angle other than 90/180/270 or a tint without a known colour.
// Negation is not understood: "do not blur" blurs.
package reference
