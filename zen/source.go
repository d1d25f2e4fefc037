package zen

import (
	"fmt"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// sources lists every pool source in order.
var sources = [...]Source{SourceFollowing, SourceInterest, SourceRelated}

// String returns the source's name as config, weight and scenario files spell it
// ("following", "interest", "related"), or "source N" for any other number.
func (s Source) String() string {
	switch s {
	case SourceFollowing:
		return "following"
	case SourceInterest:
		return "interest"
	case SourceRelated:
		return "related"
	}
	return fmt.Sprintf("source %d", uint8(s))
}

// ParseSource reads a source's name, the inverse of String.
func ParseSource(name string) (Source, error) {
	for _, s := range sources {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown source %s (want following, interest or related)", quote.Q(name))
}
