package feedsvc

import (
	_ "example.com/badmod/cmd/tool/flags"
)
