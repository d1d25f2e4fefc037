// Package generator composes a user's next chunk of pins from their pools: how many, which
// sources at what rates, what to defer, best-first; pins in a chunk leave the pools exactly once.
package generator
