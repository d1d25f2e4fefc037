package zen

import (
	_ "example.com/goodmod/zen/seq"
)
