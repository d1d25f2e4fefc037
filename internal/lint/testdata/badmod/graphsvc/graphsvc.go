package graphsvc

import (
	_ "example.com/badmod/graphsvc/store"
)
