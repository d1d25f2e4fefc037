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
// goroutine: no goroutine, no flush wait and no tracing span per call. Calls whose region is
// not in the cache look it up one region at a time (the first such call goes through SendRPC,
// then the calls its region covers are batched). The rest (a region unavailable, a call that
// cannot be batched, a lookup that failed) and any call whose batched send failed go through
// SendRPC one by one, concurrently, with its lookups and retries. Each call's result
// is its own: a failure of one does not fail the others. Every call must carry ctx (or a context
// ending no later): SendBatch stops waiting when ctx ends, and the calls not answered by then
// have ctx's error.
func (c *client) SendBatch(ctx context.Context, calls []hrpc.Call) []hrpc.RPCResult {
	res := make([]hrpc.RPCResult, len(calls))
	pending := make([]int, len(calls))
	for i := range calls {
		pending[i] = i
	}
	var slow []int
	for len(pending) > 0 {
		var cold []int
		slow, cold = c.sendCached(ctx, calls, pending, res, slow)
		pending = nil
		if len(cold) == 0 || ctx.Err() != nil {
			slow = append(slow, cold...)
			break
		}
		// Regions not in the cache yet (a new client, a new table): look one up by sending its
		// first call through SendRPC, then batch the calls its region now covers and repeat,
		// so a cold batch costs one hbase:meta lookup per region instead of one per call
		// (thousands of concurrent lookups swamp the region server holding hbase:meta, and
		// time out). When the call fails, or leaves its region uncached, the rest go through
		// SendRPC concurrently.
		lead := cold[0]
		msg, err := c.SendRPC(calls[lead])
		res[lead] = hrpc.RPCResult{Msg: msg, Error: err}
		if err != nil || c.getRegionFromCache(calls[lead].Table(), calls[lead].Key()) == nil {
			slow = append(slow, cold[1:]...)
			break
		}
		pending = cold[1:]
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

// sendCached sends the calls of idx whose region is cached and available as multi requests,
// grouped by region server, waits for them and fills res. It returns slow with the calls that
// must go through SendRPC appended (not batchable, region unavailable, batched send failed), and
// cold, the calls whose region is not in the cache.
func (c *client) sendCached(ctx context.Context, calls []hrpc.Call, idx []int,
	res []hrpc.RPCResult, slow []int) ([]int, []int) {
	type group struct {
		rc  batchQueuer
		idx []int
	}
	var groups []group
	byClient := map[hrpc.RegionClient]int{}
	var cold []int
	var last hrpc.RegionInfo // the region of the call before: sorted keys share regions
	var lastTable []byte
	for _, i := range idx {
		call := calls[i]
		if !batchable(call) {
			slow = append(slow, i)
			continue
		}
		reg := last
		if reg == nil || !bytes.Equal(call.Table(), lastTable) || !inRegion(reg, call.Key()) ||
			reg.Context().Err() != nil {
			reg = c.getRegionFromCache(call.Table(), call.Key())
		}
		if reg == nil {
			cold = append(cold, i)
			continue
		}
		if reg.IsUnavailable() {
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
	return slow, cold
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
