// Package worker holds the pinlater handlers that turn upstream events (pins, repins, follows,
// interest tags, related pins, deletes) into scored rows in each receiving user's per-source pools.
package worker
