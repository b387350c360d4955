package english

import (
	"strconv"
	"strings"
)

// Count is n followed by noun, in the plural unless n is 1 or -1.
func Count(n int, noun string) string {
	return strconv.Itoa(n) + " " + Plural(n, noun)
}

// Plural is noun, in the plural unless n is 1 or -1.
func Plural(n int, noun string) string {
	if n == 1 || n == -1 {
		return noun
	}
	switch {
	case strings.HasSuffix(noun, "s"), strings.HasSuffix(noun, "x"), strings.HasSuffix(noun, "ch"), strings.HasSuffix(noun, "sh"):
		return noun + "es"
	case strings.HasSuffix(noun, "y") && len(noun) > 1 && !strings.ContainsRune("aeiou", rune(noun[len(noun)-2])):
		return noun[:len(noun)-1] + "ies"
	}
	return noun + "s"
}

// Ordinal is n as an ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
func Ordinal[N ~int | ~int64](n N) string {
	suffix := "th"
	s := strconv.FormatInt(int64(n), 10)
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return s + suffix
}
