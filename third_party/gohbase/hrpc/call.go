// Copyright (C) 2015  The GoHBase Authors.  All rights reserved.
// This file is part of GoHBase.
// Use of this source code is governed by the Apache License 2.0
// that can be found in the COPYING file.

package hrpc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/tsuna/gohbase/pb"
	"google.golang.org/protobuf/proto"
)

// RegionInfo represents HBase region.
type RegionInfo interface {
	IsUnavailable() bool
	AvailabilityChan() <-chan struct{}
	MarkUnavailable() bool
	MarkAvailable()
	MarkDead()
	Context() context.Context
	String() string
	ID() uint64
	Name() []byte
	StartKey() []byte
	StopKey() []byte
	Namespace() []byte
	Table() []byte
	SetClient(RegionClient)
	Client() RegionClient
}

// RegionClient represents HBase region client.
type RegionClient interface {
	// Dial connects and bootstraps region client. Only the first caller to Dial gets to
	// actually connect, other concurrent callers will block until connected or an error.
	Dial(context.Context) error
	Close()
	Addr() string
	QueueRPC(Call)
	String() string
}

// Call represents an HBase RPC call.
type Call interface {
	Table() []byte
	Name() string
	Key() []byte
	Region() RegionInfo
	SetRegion(region RegionInfo)
	ToProto() proto.Message
	// Returns a newly created (default-state) protobuf in which to store the
	// response of this call.
	NewResponse() proto.Message
	ResultChan() chan RPCResult
	Description() string // Used for tracing and metrics
	Context() context.Context
	SetContext(context.Context)
}

type withOptions interface {
	Options() []func(Call) error
	setOptions([]func(Call) error)
}

// Batchable interface should be implemented by calls that can be batched into MultiRequest
type Batchable interface {
	// SkipBatch returns true if a call shouldn't be batched into MultiRequest and
	// should be sent right away.
	SkipBatch() bool

	setSkipBatch(v bool)
}

// SkipBatch is an option for batchable requests (Get and Mutate) to tell
// the client to skip batching and just send the request to Region Server
// right away.
func SkipBatch() func(Call) error {
	return func(c Call) error {
		if b, ok := c.(Batchable); ok {
			b.setSkipBatch(true)
			return nil
		}
		return errors.New("'SkipBatch' option only works with Get and Mutate requests")
	}
}

// hasQueryOptions is interface that needs to be implemented by calls
// that allow to provide Families and Filters options.
type hasQueryOptions interface {
	setFamilies(families map[string][]string)
	setFilter(filter *pb.Filter)
	setTimeRangeUint64(from, to uint64)
	setMaxVersions(versions uint32)
	setMaxResultsPerColumnFamily(maxresults uint32)
	setResultOffset(offset uint32)
	setCacheBlocks(cacheBlocks bool)
	setConsistency(consistency ConsistencyType)
}

// RPCResult is struct that will contain both the resulting message from an RPC
// call, and any errors that may have occurred related to making the RPC call.
type RPCResult struct {
	Msg   proto.Message
	Error error
}

type base struct {
	ctxM sync.Mutex
	ctx  context.Context

	table   []byte
	key     []byte
	options []func(Call) error

	region   RegionInfo
	resultch chan RPCResult
}

func (b *base) Context() context.Context {
	b.ctxM.Lock()
	defer b.ctxM.Unlock()

	return b.ctx
}

func (b *base) SetContext(ctx context.Context) {
	b.ctxM.Lock()
	defer b.ctxM.Unlock()

	b.ctx = ctx
}

func (b *base) Region() RegionInfo {
	return b.region
}

func (b *base) SetRegion(region RegionInfo) {
	b.region = region
}

var RegionSpecifierRegionName = pb.RegionSpecifier_REGION_NAME.Enum()

func (b *base) regionSpecifier() *pb.RegionSpecifier {
	return &pb.RegionSpecifier{
		Type:  RegionSpecifierRegionName,
		Value: []byte(b.region.Name()),
	}
}

func (b *base) setOptions(options []func(Call) error) {
	b.options = options
}

// Options returns all the options passed to this call
func (b *base) Options() []func(Call) error {
	return b.options
}

func applyOptions(call Call, options ...func(Call) error) error {
	call.(withOptions).setOptions(options)
	for _, option := range options {
		err := option(call)
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *base) Table() []byte {
	return b.table
}

func (b *base) Key() []byte {
	return b.key
}

func (b *base) ResultChan() chan RPCResult {
	return b.resultch
}

// Cell is the smallest level of granularity in returned results.
// Represents a single cell in HBase (a row will have one cell for every qualifier).
type Cell pb.Cell

func (c *Cell) String() string {
	return (*pb.Cell)(c).String()
}

// cellFromCellBlock deserializes a cell from a reader. Every length in the cell is checked
// against the bytes it has before it is used: a cell block that does not add up is an error,
// never a panic (SmartFeed patch; the unchecked slicing below panicked on a garbled multi
// response, taking the whole process down: tsuna/gohbase#144).
func cellFromCellBlock(b []byte) (*pb.Cell, uint32, error) {
	if len(b) < 4 {
		return nil, 0, fmt.Errorf(
			"buffer is too small: expected %d, got %d", 4, len(b))
	}

	kvLen := binary.BigEndian.Uint32(b[0:4])
	if uint64(len(b)) < uint64(kvLen)+4 {
		return nil, 0, fmt.Errorf(
			"buffer is too small: expected %d, got %d", uint64(kvLen)+4, len(b))
	}
	// The fixed part: key length, value length, row length, family length, timestamp, type.
	const fixed = 4 + 4 + 2 + 1 + 8 + 1
	if kvLen < fixed {
		return nil, 0, fmt.Errorf("KeyValue of %d bytes, shorter than its fixed fields (%d)", kvLen, fixed)
	}
	kv := b[4 : 4+kvLen]

	rowKeyLen := binary.BigEndian.Uint32(kv[0:4])
	valueLen := binary.BigEndian.Uint32(kv[4:8])
	keyLen := binary.BigEndian.Uint16(kv[8:10])
	if uint64(4+4)+uint64(rowKeyLen)+uint64(valueLen) != uint64(kvLen) {
		return nil, 0, fmt.Errorf("HBase has lied about KeyValue length: expected %d, got %d",
			kvLen, uint64(4+4)+uint64(rowKeyLen)+uint64(valueLen))
	}
	// rowKeyLen covers row length (2), row, family length (1), family, qualifier, timestamp (8)
	// and type (1).
	if uint64(2)+uint64(keyLen)+1+8+1 > uint64(rowKeyLen) {
		return nil, 0, fmt.Errorf("row of %d bytes does not fit a key of %d", keyLen, rowKeyLen)
	}
	rest := kv[10:]

	key := rest[:keyLen]
	rest = rest[keyLen:]

	familyLen := rest[0]
	rest = rest[1:]
	if uint64(2)+uint64(keyLen)+1+uint64(familyLen)+8+1 > uint64(rowKeyLen) {
		return nil, 0, fmt.Errorf("family of %d bytes does not fit a key of %d", familyLen, rowKeyLen)
	}

	family := rest[:familyLen]
	rest = rest[familyLen:]

	qualifierLen := rowKeyLen - uint32(keyLen) - uint32(familyLen) - 2 - 1 - 8 - 1
	qualifier := rest[:qualifierLen]
	rest = rest[qualifierLen:]

	timestamp := binary.BigEndian.Uint64(rest[:8])
	rest = rest[8:]

	cellType := uint8(rest[0])
	rest = rest[1:]

	value := rest[:valueLen]

	return &pb.Cell{
		Row:       key,
		Family:    family,
		Qualifier: qualifier,
		Timestamp: &timestamp,
		Value:     value,
		CellType:  pb.CellType(cellType).Enum(),
	}, kvLen + 4, nil
}

func deserializeCellBlocks(b []byte, cellsLen uint32) ([]*pb.Cell, uint32, error) {
	cells := make([]*pb.Cell, cellsLen)
	var readLen uint32
	for i := 0; i < int(cellsLen); i++ {
		c, l, err := cellFromCellBlock(b[readLen:])
		if err != nil {
			return nil, readLen, err
		}
		cells[i] = c
		readLen += l
	}
	return cells, readLen, nil
}

// Result holds a slice of Cells as well as miscellaneous information about the response.
type Result struct {
	Cells   []*Cell
	Stale   bool
	Partial bool
	// Exists is only set if existance_only was set in the request query.
	Exists *bool
}

func (c *Result) String() string {
	return fmt.Sprintf("cells:%v stale:%v partial:%v exists:%v ",
		c.Cells, c.Stale, c.Partial, c.Exists)
}

func extractBool(v *bool) bool {
	return v != nil && *v
}

// ToLocalResult takes a protobuf Result type and converts it to our own
// Result type in constant time.
func ToLocalResult(pbr *pb.Result) *Result {
	if pbr == nil {
		return &Result{}
	}
	return &Result{
		// Should all be O(1) operations.
		Cells:   toLocalCells(pbr),
		Stale:   extractBool(pbr.Stale),
		Partial: extractBool(pbr.Partial),
		Exists:  pbr.Exists,
	}
}

func toLocalCells(pbr *pb.Result) []*Cell {
	return *(*[]*Cell)(unsafe.Pointer(&pbr.Cell))
}

// We can now define any helper functions on Result that we want.
