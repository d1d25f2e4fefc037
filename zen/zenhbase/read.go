package zenhbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/tsuna/gohbase"
	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"

	"github.com/smartfeed/smartfeed/zen"
)

func (t *Table) cell(r *hrpc.Result) ([]byte, bool, error) {
	for _, c := range r.Cells {
		if string(c.Family) == t.fam && string(c.Qualifier) == qualifier {
			v, err := decodeValue(c.Value)
			return v, true, err
		}
	}
	return nil, false, nil
}

// getKey is Get's work, without its span.
func (t *Table) getKey(ctx context.Context, key []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("get %s: %w", t.name, err)
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	v, err := t.get(ctx, key)
	if err != nil && !errors.Is(err, zen.ErrNotFound) {
		return nil, fmt.Errorf("get %s %x: %w", t.name, key, err)
	}
	return v, err
}

func (t *Table) get(ctx context.Context, key []byte) ([]byte, error) {
	return t.getVia(ctx, t.s.reader, key)
}

// getVia is get through client c.
func (t *Table) getVia(ctx context.Context, c gohbase.Client, key []byte) ([]byte, error) {
	g, err := hrpc.NewGet(ctx, t.name, key, t.families)
	if err != nil {
		return nil, err
	}
	r, err := c.Get(g)
	if err != nil {
		return nil, ctxErr(ctx, err)
	}
	v, ok, err := t.cell(r)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, zen.ErrNotFound
	}
	return v, nil
}

// scan is Scan's work, without its span.
//
// HBase's reversed scan runs from an inclusive start row down to an exclusive stop row, the
// mirror of zen's half-open range, so a reverse scan starts at Stop and drops a row equal to
// Stop (or at a row above every valid key when Stop is nil), drops a row equal to Stop, stops at
// a proper prefix of Start (which sorts before Start) and ends at the first row below Start.
func (t *Table) scan(ctx context.Context, o zen.ScanOptions) ([]zen.KV, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.Limit < 0 {
		return nil, fmt.Errorf("scan %s: negative limit %d", t.name, o.Limit)
	}
	if o.Stop != nil && (len(o.Stop) == 0 || bytes.Compare(o.Start, o.Stop) >= 0) {
		return nil, nil
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	opts := []func(hrpc.Call) error{t.families}
	if o.Limit > 0 {
		opts = append(opts, hrpc.NumberOfRows(uint32(min(o.Limit+1, 1000))))
	}
	var sc *hrpc.Scan
	var err error
	if o.Reverse {
		start, stop := bytes.Clone(o.Stop), []byte(nil)
		if o.Stop == nil {
			start = endRow
		}
		if len(o.Start) > 0 {
			stop = bytes.Clone(o.Start[:len(o.Start)-1])
		}
		sc, err = hrpc.NewScanRange(ctx, t.name, start, stop, append(opts, hrpc.Reversed())...)
	} else {
		sc, err = hrpc.NewScanRange(ctx, t.name, bytes.Clone(o.Start), bytes.Clone(o.Stop), opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", t.name, err)
	}
	scanner := t.s.reader.Scan(sc)
	defer scanner.Close()
	var out []zen.KV
	for {
		r, err := scanner.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("scan %s: %w", t.name, ctxErr(ctx, err))
		}
		if len(r.Cells) == 0 {
			continue
		}
		row := r.Cells[0].Row
		if o.Reverse {
			if o.Stop != nil && bytes.Equal(row, o.Stop) {
				continue
			}
			if bytes.Compare(row, o.Start) < 0 {
				break
			}
		}
		v, ok, err := t.cell(r)
		if err != nil {
			return nil, fmt.Errorf("scan %s %x: %w", t.name, row, err)
		}
		if !ok {
			continue
		}
		out = append(out, zen.KV{Key: bytes.Clone(row), Value: v})
		if o.Limit > 0 && len(out) >= o.Limit {
			break
		}
	}
	return out, nil
}

// getMany is GetMany's work, without its span.
func (t *Table) getMany(ctx context.Context, keys [][]byte) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, fmt.Errorf("get many %s: %w", t.name, err)
		}
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	out := make([][]byte, len(keys))
	if len(keys) >= batchFrom {
		gets := make([]hrpc.Call, len(keys))
		for i, k := range keys {
			g, err := hrpc.NewGet(ctx, t.name, k, t.families)
			if err != nil {
				return nil, fmt.Errorf("get many %s: %w", t.name, err)
			}
			gets[i] = g
		}
		for i, r := range t.s.reader.SendBatch(ctx, gets) {
			if r.Error != nil {
				return nil, fmt.Errorf("get many %s %x: %w", t.name, keys[i], ctxErr(ctx, r.Error))
			}
			gr, ok := r.Msg.(*pb.GetResponse)
			if !ok {
				return nil, fmt.Errorf("get many %s %x: a %T, not a GetResponse", t.name, keys[i], r.Msg)
			}
			v, found, err := t.cell(hrpc.ToLocalResult(gr.Result))
			if err != nil {
				return nil, fmt.Errorf("get many %s %x: %w", t.name, keys[i], err)
			}
			if found {
				out[i] = v
			}
		}
		return out, nil
	}
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Go(func() {
			v, err := t.getVia(ctx, t.s.reader, k)
			if errors.Is(err, zen.ErrNotFound) {
				return
			}
			out[i], errs[i] = v, err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("get many %s %x: %w", t.name, keys[i], err)
		}
	}
	return out, nil
}

// scanMany is ScanMany's work, without its span. Its scans make no spans of their own: the
// call is one span, with the scans' RPCs under it.
func (t *Table) scanMany(ctx context.Context, opts []zen.ScanOptions) ([][]zen.KV, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]zen.KV, len(opts))
	errs := make([]error, len(opts))
	sem := make(chan struct{}, maxInflightScans)
	var wg sync.WaitGroup
	for i, o := range opts {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[i], errs[i] = t.scan(ctx, o)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
