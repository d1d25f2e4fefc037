package generator

import (
	"testing"

	"github.com/smartfeed/smartfeed/zen"
)

// FuzzParseConfig: any input gives a valid config or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"max_chunk": 30, "sources": {"following": {"rate": 1, "threshold": 0.2}}}`))
	f.Add([]byte(`{"max_age": "48h", "read_factor": 1.5}`))
	f.Add([]byte(`{"sources": {}}`))
	f.Add([]byte(`{"min_chunk": 1e308}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("ParseConfig accepted an invalid config: %v", verr)
			}
		}
	})
}

// FuzzParseChunkID: a chunk ID parses only back to what chunkID formats, never panics.
func FuzzParseChunkID(f *testing.F) {
	f.Add(uint64(241294629943640797), "241294629943640797-7")
	f.Add(uint64(1), "1-0")
	f.Add(uint64(1), "-")
	f.Add(uint64(5), "5-18446744073709551616")
	f.Fuzz(func(t *testing.T, user uint64, id string) {
		no, err := parseChunkID(zen.ID(user), id)
		if err == nil && chunkID(zen.ID(user), no) != id {
			// Leading zeros or a plus sign parse to the same number; they must still name this user's chunk.
			if _, err2 := parseChunkID(zen.ID(user), chunkID(zen.ID(user), no)); err2 != nil {
				t.Fatalf("parseChunkID(%q) = %d but its canonical form is refused: %v", id, no, err2)
			}
		}
	})
}
