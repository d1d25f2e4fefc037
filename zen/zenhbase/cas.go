package zenhbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tsuna/gohbase/filter"
	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
	"google.golang.org/protobuf/proto"

	"github.com/smartfeed/smartfeed/zen"
)

// checkAndDelete is an HBase check-and-delete: a row Delete sent as a MutateRequest with a
// Condition, which the region server applies under the row lock only if the condition holds.
// This gohbase version only builds the conditional Put, so the condition is added here.
type checkAndDelete struct {
	*hrpc.Mutate
	cond *pb.Condition
}

func (c checkAndDelete) ToProto() proto.Message {
	req := c.Mutate.ToProto().(*pb.MutateRequest)
	req.Condition = c.cond
	return req
}

// CellBlocksEnabled is false: the condition travels in the protobuf, not in cell blocks.
func (c checkAndDelete) CellBlocksEnabled() bool { return false }

// SkipBatch is true: a batched (multi) response does not say whether the condition held.
func (c checkAndDelete) SkipBatch() bool { return true }

// checkAndSetKey is CheckAndSet's work, without its span.
func (t *Table) checkAndSetKey(ctx context.Context, key, expected, value []byte) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := checkKey(key); err != nil {
		return false, fmt.Errorf("check-and-set %s: %w", t.name, err)
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	ok, err := t.checkAndSet(ctx, bytes.Clone(key), expected, value)
	if err != nil {
		return false, fmt.Errorf("check-and-set %s %x: %w", t.name, key, ctxErr(ctx, err))
	}
	return ok, nil
}

func (t *Table) checkAndSet(ctx context.Context, key, expected, value []byte) (bool, error) {
	var exp []byte // nil: HBase's "the cell does not exist"; stored cells are never empty
	if expected != nil {
		exp = encodeValue(expected)
	}
	switch {
	case expected == nil && value == nil: // delete if absent: nothing to write
		_, err := t.get(ctx, key)
		if errors.Is(err, zen.ErrNotFound) {
			return true, nil
		}
		return false, err
	case value == nil:
		del, err := hrpc.NewDel(ctx, t.name, key, nil)
		if err != nil {
			return false, err
		}
		cmp, err := filter.NewBinaryComparator(filter.NewByteArrayComparable(exp)).ConstructPBComparator()
		if err != nil {
			return false, err
		}
		call := checkAndDelete{Mutate: del, cond: &pb.Condition{
			Row: key, Family: []byte(t.fam), Qualifier: []byte(qualifier),
			CompareType: pb.CompareType_EQUAL.Enum(), Comparator: cmp,
		}}
		msg, err := t.s.rpc.SendRPC(call)
		if err != nil {
			return false, err
		}
		res, ok := msg.(*pb.MutateResponse)
		if !ok || res.Processed == nil {
			return false, fmt.Errorf("check-and-delete: response %T without processed flag", msg)
		}
		return res.GetProcessed(), nil
	default:
		put, err := hrpc.NewPut(ctx, t.name, key,
			map[string]map[string][]byte{t.fam: {qualifier: encodeValue(value)}})
		if err != nil {
			return false, err
		}
		return t.s.reader.CheckAndPut(put, t.fam, qualifier, exp)
	}
}

// incrementKey is Increment's work, without its span.
func (t *Table) incrementKey(ctx context.Context, key []byte, delta int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := checkKey(key); err != nil {
		return 0, fmt.Errorf("increment %s: %w", t.name, err)
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	n, err := t.increment(ctx, bytes.Clone(key), delta)
	if err != nil {
		return 0, fmt.Errorf("increment %s %x: %w", t.name, key, ctxErr(ctx, err))
	}
	return n, nil
}

// checkAndSetMany is CheckAndSetMany's work, without its span.
func (t *Table) checkAndSetMany(ctx context.Context, conds []zen.Cond) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]bool, len(conds))
	if len(conds) == 0 {
		return out, nil
	}
	// groups lists the conditions of each distinct key, in order.
	var groups [][]int
	byKey := make(map[string]int, len(conds))
	for i, c := range conds {
		if err := checkKey(c.Key); err != nil {
			return nil, fmt.Errorf("check-and-set many %s: condition %d: %w", t.name, i, err)
		}
		g, ok := byKey[string(c.Key)]
		if !ok {
			g = len(groups)
			byKey[string(c.Key)] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	errs := make([]error, len(conds))
	sem := make(chan struct{}, maxInflightCAS)
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			for _, i := range g {
				c := conds[i]
				ok, err := t.checkAndSet(ctx, bytes.Clone(c.Key), c.Expected, c.Value)
				if err != nil {
					errs[i] = err
					return // later conditions on the key would not see this one's outcome
				}
				out[i] = ok
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("check-and-set many %s %x: %w", t.name, conds[i].Key, ctxErr(ctx, err))
		}
	}
	return out, nil
}
