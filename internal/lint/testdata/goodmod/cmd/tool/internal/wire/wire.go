package wire

import (
	_ "example.com/goodmod/worker"
)
