package store

import (
	_ "example.com/badmod/internal/relay"
)
