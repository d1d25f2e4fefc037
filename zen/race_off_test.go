//go:build !race

package zen_test

// raceEnabled reports a -race build.
const raceEnabled = false
