// Package jsontime holds Duration, the one JSON form of a time.Duration in SmartFeed's
// documents (the binary's config file, the generator's config): a Go duration string such as
// "150ms", "30s" or "336h", rather than encoding/json's count of nanoseconds.
package jsontime

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string ("150ms", "30s").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string; spaces around it are ignored. A number (nanoseconds
// in encoding/json's own form) is refused: "30" is 30 ns there, which no one means.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string like \"150ms\": %w", err)
	}
	v, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}
