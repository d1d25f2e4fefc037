// Package graphsvc is the gRPC face of zen for frontends and producers: users, boards, pins,
// interests, follows and reorders, enqueuing the feed events each write implies.
package graphsvc
