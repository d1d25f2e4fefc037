// Package quote bounds what an error message quotes of its input: a client that sends a 1 MB
// ID must not get a 1 MB error back (gRPC C-core clients fail with RST_STREAM above ~16 KB).
package quote

import (
	"strconv"
	"unicode/utf8"
)

// Max is the most bytes of an input an error message quotes.
const Max = 64

// Q returns s quoted as %q does when it is at most Max bytes long; a longer s is cut to its
// first Max bytes (at a rune boundary) and followed by its length: "1234…"(1048576 bytes).
func Q(s string) string {
	if len(s) <= Max {
		return strconv.Quote(s)
	}
	cut := Max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]+"…") + "(" + strconv.Itoa(len(s)) + " bytes)"
}

// Message bounds a whole message, such as a status built elsewhere: at most limit bytes, cut
// at a rune boundary and marked with the full length.
func Message(msg string, limit int) string {
	if len(msg) <= limit {
		return msg
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…(" + strconv.Itoa(len(msg)) + " bytes)"
}
