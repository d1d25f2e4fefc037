package main

import _ "example.com/goodmod/cmd/tool/internal/wire"

func main() {}
