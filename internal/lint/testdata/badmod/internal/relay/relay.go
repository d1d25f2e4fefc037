package relay

import (
	_ "example.com/badmod/generator"
)
