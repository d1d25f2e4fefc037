package jsontime

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{`"150ms"`, 150 * time.Millisecond, ""},
		{`" 30s "`, 30 * time.Second, ""},
		{`"336h"`, 336 * time.Hour, ""},
		{`30`, 0, "want a string"},
		{`"30"`, 0, "missing unit"},
		{`"soon"`, 0, "invalid duration"},
	}
	for _, tc := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Unmarshal(%s) = %v, %v; want an error containing %q", tc.in, d, err, tc.wantErr)
			}
		case err != nil || d.D() != tc.want:
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tc.in, d, err, tc.want)
		}
	}
	b, err := json.Marshal(Duration(90 * time.Minute))
	if err != nil || string(b) != `"1h30m0s"` {
		t.Errorf("Marshal(90m) = %s, %v; want \"1h30m0s\"", b, err)
	}
}
