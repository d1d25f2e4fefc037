package engagementsvc

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/smartfeed/smartfeed/internal/testenv"
)

// TestMain fails the package's tests when a goroutine they started outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LeakOptions()...) }
