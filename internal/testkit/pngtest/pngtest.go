// Package pngtest reads pictures the way a person looks at them, for tests
// of what a plot draws: which colours a band has, and how wide each is.
package pngtest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
)

// Decode reads the PNG file at path.
func Decode(path string) (image.Image, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return png.Decode(bytes.NewReader(data))
}

// Bottom is the bottom share of img (1/3: its lowest third), where a plot
// drawn in tiles has its last tile: a band read there is not mistaken
// for a line of the same colour in another tile.
func Bottom(img image.Image, share float64) image.Image {
	b := img.Bounds()
	top := b.Max.Y - int(float64(b.Dy())*share)
	if sub, ok := img.(interface {
		SubImage(image.Rectangle) image.Image
	}); ok {
		return sub.SubImage(image.Rect(b.Min.X, top, b.Max.X, b.Max.Y))
	}
	return img
}

// BandWidths counts, along the row of img with the most pixels of the
// given colours, the pixels of each colour: a band of coloured spans read
// across. Only exact colours count (a span's edges may be blended).
func BandWidths[K comparable](img image.Image, colours map[K]color.RGBA) map[K]int {
	b := img.Bounds()
	var best map[K]int
	bestTotal := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		row, total := map[K]int{}, 0
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			for k, c := range colours {
				if uint8(r>>8) == c.R && uint8(g>>8) == c.G && uint8(bl>>8) == c.B {
					row[k]++
					total++
				}
			}
		}
		if total > bestTotal {
			best, bestTotal = row, total
		}
	}
	return best
}
