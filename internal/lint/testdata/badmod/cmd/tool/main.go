package main

import _ "example.com/badmod/cmd/tool/flags"

func main() {}
