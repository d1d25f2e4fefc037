package zen

import (
	_ "example.com/badmod/worker"
)
