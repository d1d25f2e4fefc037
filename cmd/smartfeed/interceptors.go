package main

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/quote"
)

// maxStatusMessage bounds the message of any status the server returns: the parsers quote at
// most quote.Max bytes of their input, and this is the net under every other path.
const maxStatusMessage = 1024

// boundStatus cuts an error's status message to maxStatusMessage bytes, keeping its code.
func boundStatus(err error) error {
	if err == nil {
		return nil
	}
	s, ok := status.FromError(err)
	if !ok || len(s.Message()) <= maxStatusMessage {
		return err
	}
	p := s.Proto()
	p.Message = quote.Message(p.Message, maxStatusMessage)
	return status.ErrorProto(p)
}

func boundUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	return resp, boundStatus(err)
}

func boundStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return boundStatus(h(srv, ss))
}
