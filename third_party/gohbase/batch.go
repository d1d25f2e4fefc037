// Copyright (C) 2026  The GoHBase Authors.  All rights reserved.
// This file is part of GoHBase.
// Use of this source code is governed by the Apache License 2.0
// that can be found in the COPYING file.

// SmartFeed addition (SMARTFEED.md, fourth change): SendBatch, after upstream's later method of
// the same name, written for this version.

package gohbase

import (
	"bytes"
	"context"
	"sync"

	"github.com/tsuna/gohbase/hrpc"
)

// batchQueuer is a region client that can send many calls as multi requests at once
// (region.client.QueueBatch).
type batchQueuer interface {
	QueueBatch(ctx context.Context, calls []hrpc.Call)
}

// SendBatch sends calls (Gets and Mutates, each a separate row operation) and returns one result
// per call, in order. The calls whose region is in the cache and available are grouped by region
// server and sent at once, as multi requests of up to the client's RPC queue size, from this
// goroutine: no goroutine, no flush wait and no tracing span per call. The rest (a region not yet
// looked up or unavailable, a call that cannot be batched) and any call whose batched send failed
// go through SendRPC one by one, concurrently, with its lookups and retries. Each call's result
// is its own: a failure of one does not fail the others. Every call must carry ctx (or a context
// ending no later): SendBatch stops waiting when ctx ends, and the calls not answered by then
// have ctx's error.
func (c *client) SendBatch(ctx context.Context, calls []hrpc.Call) []hrpc.RPCResult {
	res := make([]hrpc.RPCResult, len(calls))
	type group struct {
		rc  batchQueuer
		idx []int
	}
	var groups []group
	byClient := map[hrpc.RegionClient]int{}
	var slow []int
	var last hrpc.RegionInfo // the region of the call before: sorted keys share regions
	var lastTable []byte
	for i, call := range calls {
		if !batchable(call) {
			slow = append(slow, i)
			continue
		}
		reg := last
		if reg == nil || !bytes.Equal(call.Table(), lastTable) || !inRegion(reg, call.Key()) ||
			reg.Context().Err() != nil {
			reg = c.getRegionFromCache(call.Table(), call.Key())
		}
		if reg == nil || reg.IsUnavailable() {
			slow = append(slow, i)
			continue
		}
		rc := reg.Client()
		q, ok := rc.(batchQueuer)
		if rc == nil || !ok {
			slow = append(slow, i)
			continue
		}
		last, lastTable = reg, call.Table()
		call.SetRegion(reg)
		g, ok := byClient[rc]
		if !ok {
			g = len(groups)
			byClient[rc] = g
			groups = append(groups, group{rc: q})
		}
		groups[g].idx = append(groups[g].idx, i)
	}
	for _, g := range groups {
		batch := make([]hrpc.Call, len(g.idx))
		for j, i := range g.idx {
			batch[j] = calls[i]
		}
		g.rc.QueueBatch(ctx, batch)
	}
	for _, g := range groups {
		for _, i := range g.idx {
			select {
			case r := <-calls[i].ResultChan():
				if r.Error != nil && ctx.Err() == nil {
					// A region moved, a server failed, a retryable error: SendRPC knows
					// what to do with each (it marks the region or the client down and
					// looks up again), and Gets and Puts are idempotent.
					slow = append(slow, i)
					continue
				}
				res[i] = r
			case <-ctx.Done():
				res[i] = hrpc.RPCResult{Error: ctx.Err()}
			}
		}
	}
	if len(slow) > 0 {
		var wg sync.WaitGroup
		for _, i := range slow {
			wg.Add(1)
			go func(i int) { // go1.13 semantics here: i is shared by the loop's iterations
				defer wg.Done()
				msg, err := c.SendRPC(calls[i])
				res[i] = hrpc.RPCResult{Msg: msg, Error: err}
			}(i)
		}
		wg.Wait()
	}
	return res
}

// batchable reports whether call can go in a multi request: a Get or a Mutate (not a
// check-and-put or an increment, which are Mutates wrapped or flagged otherwise) that did not ask
// to skip batching.
func batchable(call hrpc.Call) bool {
	switch call.(type) {
	case *hrpc.Get, *hrpc.Mutate:
	default:
		return false
	}
	b, ok := call.(hrpc.Batchable)
	return ok && !b.SkipBatch()
}

// inRegion reports whether key is in reg's key range.
func inRegion(reg hrpc.RegionInfo, key []byte) bool {
	if bytes.Compare(key, reg.StartKey()) < 0 {
		return false
	}
	stop := reg.StopKey()
	return len(stop) == 0 || bytes.Compare(key, stop) < 0
}
