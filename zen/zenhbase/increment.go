package zenhbase

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
	"google.golang.org/protobuf/proto"
)

// nonceGroup names this process's increments to the region servers (HBase's nonce group, one
// per client); each increment has a nonce of its own in the group.
var nonceGroup = rand.Uint64() | 1

// nonceIncrement is an HBase Increment that carries a nonce, which this gohbase version has no
// option for. gohbase sends a call again when its region server's connection fails before the
// answer arrives, and the server may have applied it already; a region server remembers the
// nonces it applied (its write-ahead log records them, so the server that reopens the region
// after a crash knows them too) and answers a repeat with the current value instead of adding
// the delta a second time.
type nonceIncrement struct {
	*hrpc.Mutate
	nonce uint64
}

func (c nonceIncrement) ToProto() proto.Message {
	req := c.Mutate.ToProto().(*pb.MutateRequest)
	group, nonce := nonceGroup, c.nonce
	req.NonceGroup = &group
	req.Mutation.Nonce = &nonce
	return req
}

// CellBlocksEnabled is false: the nonce travels in the protobuf that ToProto builds.
func (c nonceIncrement) CellBlocksEnabled() bool { return false }

// SkipBatch is true: a batched (multi) request would not carry the nonce.
func (c nonceIncrement) SkipBatch() bool { return true }

// newIncrement builds the increment of the counter at key by delta, with a fresh nonce.
func (t *Table) newIncrement(ctx context.Context, key []byte, delta int64) (nonceIncrement, error) {
	inc, err := hrpc.NewIncSingle(ctx, t.name, key, t.fam, qualifier, delta)
	if err != nil {
		return nonceIncrement{}, err
	}
	return nonceIncrement{Mutate: inc, nonce: rand.Uint64() | 1}, nil
}

// sendIncrement sends call (gohbase retries it, nonce and all) and returns the counter's value.
func (t *Table) sendIncrement(call nonceIncrement) (int64, error) {
	msg, err := t.s.rpc.SendRPC(call)
	if err != nil {
		return 0, err
	}
	res, ok := msg.(*pb.MutateResponse)
	if !ok {
		return 0, fmt.Errorf("increment: a %T, not a MutateResponse", msg)
	}
	r := hrpc.ToLocalResult(res.Result)
	if len(r.Cells) != 1 || len(r.Cells[0].Value) != 8 {
		return 0, fmt.Errorf("increment: %d cells in the answer, want one of 8 bytes", len(r.Cells))
	}
	return int64(binary.BigEndian.Uint64(r.Cells[0].Value)), nil
}

// increment adds delta to the counter at key, applied once however often gohbase sends it.
func (t *Table) increment(ctx context.Context, key []byte, delta int64) (int64, error) {
	call, err := t.newIncrement(ctx, key, delta)
	if err != nil {
		return 0, err
	}
	return t.sendIncrement(call)
}
