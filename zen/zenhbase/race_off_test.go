//go:build !race

package zenhbase

// raceEnabled reports a -race build, where sync.Pool drops items at random and allocation counts
// vary from run to run.
const raceEnabled = false
