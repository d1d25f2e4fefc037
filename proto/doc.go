// Package proto holds SmartFeed's .proto files; the generated Go code lives in subpackages and
// is committed (make proto regenerates it and leaves a clean tree).
package proto
