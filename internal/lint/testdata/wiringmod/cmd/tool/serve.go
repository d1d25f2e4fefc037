package main

import (
	"context"

	thingv1 "example.com/wiringmod/proto/thing/v1"
	"example.com/wiringmod/zen"
)

// Not allowed: a gRPC service implemented in the command, by embedding or by its methods.
type thingService struct {
	thingv1.UnimplementedThingServer // line 12: embeds
}

type handWritten struct{} // line 15: implements ThingServer

func (handWritten) Get(context.Context, string) (string, error) { return "", nil }

// Allowed: a stream value (not a service) and plain reads.
type watcher struct{}

func (watcher) Send(string) error { return nil }

func read(ctx context.Context, t zen.Table) ([]byte, error) { return t.Get(ctx, []byte("k")) }

// Not allowed: a claim protocol in the command.
func claim(ctx context.Context, t zen.Table) error {
	if _, err := t.CheckAndSet(ctx, []byte("owner"), nil, []byte("me")); err != nil { // line 28
		return err
	}
	_, err := t.Increment(ctx, []byte("epoch"), 1) // line 31
	return err
}

var _ = []any{thingService{}, handWritten{}, watcher{}, read, claim}
