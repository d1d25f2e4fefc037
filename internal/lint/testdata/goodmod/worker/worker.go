package worker

import (
	_ "example.com/goodmod/worker/queue"
	_ "example.com/goodmod/zen"
)
