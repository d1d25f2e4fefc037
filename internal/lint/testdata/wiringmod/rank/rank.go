// Package rank computes scores: float arithmetic is at home here.
package rank

// Score weighs a pin's features.
func Score(recency, affinity float64) float64 { return 0.7*recency + 0.3*affinity }
