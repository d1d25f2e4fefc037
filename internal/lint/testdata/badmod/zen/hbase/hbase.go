package hbase

import (
	_ "example.com/badmod/pinlater"
	_ "google.golang.org/grpc"
)
