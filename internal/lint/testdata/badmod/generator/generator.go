package generator
