package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/smartfeed/smartfeed/internal/config"
)

// TestLoggerFormat: "auto" writes JSON when the log does not go to a terminal (a buffer, a
// pipe: what a log collector reads), "console" always writes the console format, "json" JSON.
func TestLoggerFormat(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct {
		format string
		pipe   bool
		json   bool
	}{
		{"auto", false, true},
		{"auto", true, true},
		{"json", false, true},
		{"console", false, false},
	} {
		var buf bytes.Buffer
		var out io.Writer = &buf
		if tc.pipe {
			out = w
		}
		l, err := newLogger(config.Log{Level: "info", Format: tc.format}, out)
		if err != nil {
			t.Fatal(err)
		}
		l.Info("hello")
		_ = l.Sync()
		line := buf.String()
		if tc.pipe {
			b := make([]byte, 4096)
			n, _ := r.Read(b)
			line = string(b[:n])
		}
		var m map[string]any
		isJSON := json.Unmarshal([]byte(strings.TrimSpace(line)), &m) == nil
		if isJSON != tc.json {
			t.Errorf("format %q (pipe %v): wrote %q; JSON %v, want %v", tc.format, tc.pipe, line, isJSON, tc.json)
		}
	}
	w.Close()
}
