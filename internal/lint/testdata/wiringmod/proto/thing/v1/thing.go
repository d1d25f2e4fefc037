// Package thingv1 stands for generated gRPC code: a service interface and its Unimplemented
// base.
package thingv1

import "context"

// ThingServer is the service.
type ThingServer interface {
	Get(context.Context, string) (string, error)
}

// UnimplementedThingServer answers every method with an error.
type UnimplementedThingServer struct{}

// Get is not implemented.
func (UnimplementedThingServer) Get(context.Context, string) (string, error) { return "", nil }

// Thing_WatchServer is a stream, not a service: implementing it is no violation.
type Thing_WatchServer interface {
	Send(string) error
}
