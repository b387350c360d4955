package memckpt

import (
	"fmt"
	"strconv"
	"strings"
)

var sizeUnits = []struct {
	suffix string
	factor int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1},
}

// ParseSize reads a size in bytes: a whole number, or one with a unit as in
// 512MiB, 2GiB or 1G (K, M, G and T alone are binary, as Kubernetes' Ki,
// Mi, Gi and Ti).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	factor := int64(1)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, factor = strings.TrimSpace(num), u.factor
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (n > 0 && factor > (1<<62)/n) {
		return 0, fmt.Errorf("size %q: want a number of bytes, or one with a unit as in 512MiB or 2GiB", s)
	}
	return n * factor, nil
}

// FormatSize writes a size in the largest binary unit it fills.
func FormatSize(n int64) string {
	for _, u := range sizeUnits[:4] {
		if n >= u.factor {
			v := float64(n) / float64(u.factor)
			if n%u.factor == 0 {
				return fmt.Sprintf("%d%s", n/u.factor, u.suffix)
			}
			return fmt.Sprintf("%.1f%s", v, u.suffix)
		}
	}
	return fmt.Sprintf("%dB", n)
}
