// Package zenhbase is the HBase zen.Store, over gohbase: every zen table is one HBase table
// (name = Options.TablePrefix + zen name) with one column family and one qualifier.
//
// Tables are created on first use, pre-split on shard boundaries: zen row keys begin with a
// big-endian zen.ID whose bits 61..46 are the shard, so the split key of shard s is the 8 bytes
// of s<<46, and a split every SplitEvery shards spreads the shards of the shard map over
// Shards/SplitEvery regions (16 by default).
//
// Cell values are stored in an encoding that keeps two HBase behaviours from leaking through:
//   - HBase's check-and-mutate treats an empty cell like a missing one, but zen's CheckAndSet
//     tells them apart, so no stored cell is ever empty;
//   - HBase's Increment works in place on an 8-byte cell, and zen's Increment works on an
//     8-byte value, so 8-byte values are stored as they are.
//
// A value of 8 bytes is stored raw; a value of 7 bytes gets two 0x00 bytes appended (9 bytes);
// any other value gets one 0x00 appended. The stored length alone tells how to decode.
//
// The column family keeps one version and is created with NEW_VERSION_BEHAVIOR=true, so that a
// delete masks only the writes that came before it: without it, a delete marker hides a later
// put that lands in the same millisecond.
//
// Atomicity: Apply is atomic per row only (the zen.Table contract says so); its puts and
// deletes are sent concurrently and gohbase batches them per region server. CheckAndSet is an
// HBase check-and-mutate (a conditional Put, or a conditional Delete sent as the same
// MutateRequest with a Condition, which this gohbase version has no helper for), so it is
// atomic under the region server's row lock. Increment is HBase's Increment.
//
// Every call is bounded by its context; a context without a deadline gets Options.CallTimeout,
// because gohbase retries some failures for as long as the context allows.
package zenhbase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tsuna/gohbase"
	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
	"google.golang.org/protobuf/proto"

	"github.com/smartfeed/smartfeed/zen"
)

const qualifier = "v"

// Options configures Open. The zero value of each field selects its default.
type Options struct {
	// TablePrefix is put in front of every zen table name (default "smartfeed_").
	TablePrefix string
	// Family is the column family of every table (default "f").
	Family string
	// CallTimeout bounds every call whose context has no deadline (default 5s).
	CallTimeout time.Duration
	// CreateTimeout bounds the creation of a table on first use (default 2m).
	CreateTimeout time.Duration
	// FlushInterval is how long gohbase waits to batch blind writes (Apply) to a region server
	// (gohbase's default when zero: 20ms). Reads, compare-and-sets and increments go through
	// a second client that never waits: it sends at once whatever calls are queued (concurrent
	// calls still share a multi request), so a Get, or a claim its caller waits on, does not
	// pay the write batching's wait.
	FlushInterval time.Duration
	// RPCQueueSize is how many calls gohbase batches per region server before it flushes
	// (gohbase's default when zero: 100; 1 disables batching).
	RPCQueueSize int
	// SplitEvery is the number of shards per pre-split region (default 256).
	SplitEvery int
	// Shards is the number of shards the pre-split covers (default 4096, the default shard map).
	Shards int
	// ZookeeperRoot is HBase's znode (default "/hbase").
	ZookeeperRoot string
	// Replicated creates tables with REPLICATION_SCOPE 1 on their column family, so HBase's own
	// replication ships their writes to the cluster's replication peers (a standby). The
	// tables must exist on the peer too: open the same tables there with the same prefix.
	// It applies when this Store creates a table; an existing table keeps its scope.
	Replicated bool
}

// DefaultTablePrefix is Options.TablePrefix's default.
const DefaultTablePrefix = "smartfeed_"

func (o *Options) defaults() error {
	if o.TablePrefix == "" {
		o.TablePrefix = DefaultTablePrefix
	}
	if o.Family == "" {
		o.Family = "f"
	}
	if o.CallTimeout == 0 {
		o.CallTimeout = 5 * time.Second
	}
	if o.CreateTimeout == 0 {
		o.CreateTimeout = 2 * time.Minute
	}
	if o.SplitEvery == 0 {
		o.SplitEvery = 256
	}
	if o.Shards == 0 {
		o.Shards = 4096
	}
	switch {
	case o.CallTimeout < 0 || o.CreateTimeout < 0 || o.FlushInterval < 0:
		return errors.New("negative timeout or flush interval")
	case o.RPCQueueSize < 0:
		return fmt.Errorf("rpc queue size %d", o.RPCQueueSize)
	case o.SplitEvery < 0 || o.Shards < 0 || o.Shards > zen.MaxShard+1:
		return fmt.Errorf("split every %d of %d shards", o.SplitEvery, o.Shards)
	}
	for _, c := range o.TablePrefix + o.Family {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return fmt.Errorf("table prefix %q or family %q: want only [A-Za-z0-9_]", o.TablePrefix, o.Family)
		}
	}
	return nil
}

// SplitKeys returns the split keys of a table pre-split every `every` shards over `shards`
// shards: the 8-byte big-endian IDs s<<46 for s = every, 2·every, … below shards.
func SplitKeys(every, shards int) [][]byte {
	var out [][]byte
	for s := every; every > 0 && s < shards; s += every {
		out = append(out, binary.BigEndian.AppendUint64(nil, uint64(s)<<46))
	}
	return out
}

// Store is a zen.Store over one HBase cluster. It is safe for concurrent use.
type Store struct {
	opts   Options
	zk     string         // the ZooKeeper quorum Open was given
	client gohbase.Client // blind writes (Apply), batched for FlushInterval
	// reader sends at once: reads, and the compare-and-sets and increments, whose caller
	// waits on the answer to decide what to do next (a claim, a take, a recording).
	reader gohbase.Client
	rpc    gohbase.RPCClient // raw RPCs on reader
	admin  gohbase.AdminClient
	arpc   gohbase.RPCClient

	mu     sync.Mutex
	tables map[string]*Table
}

var _ zen.Store = (*Store)(nil)

// Open connects to the HBase cluster whose ZooKeeper quorum is zkQuorum ("host:port,…").
// gohbase connects lazily; Open checks the cluster by asking the master for its table list.
func Open(ctx context.Context, zkQuorum string, opts Options) (*Store, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("open hbase: %w", err)
	}
	if zkQuorum == "" {
		return nil, errors.New("open hbase: empty zookeeper quorum")
	}
	var gopts []gohbase.Option
	if opts.FlushInterval > 0 {
		gopts = append(gopts, gohbase.FlushInterval(opts.FlushInterval))
	}
	if opts.RPCQueueSize > 0 {
		gopts = append(gopts, gohbase.RpcQueueSize(opts.RPCQueueSize))
	}
	if opts.ZookeeperRoot != "" {
		gopts = append(gopts, gohbase.ZookeeperRoot(opts.ZookeeperRoot))
	}
	client := gohbase.NewClient(zkQuorum, gopts...)
	// A zero flush interval makes gohbase send each batch as soon as no more calls are queued.
	reader := gohbase.NewClient(zkQuorum, append(slices.Clone(gopts), gohbase.FlushInterval(0))...)
	admin := gohbase.NewAdminClient(zkQuorum, gopts...)
	rpc, ok1 := reader.(gohbase.RPCClient)
	arpc, ok2 := admin.(gohbase.RPCClient)
	if !ok1 || !ok2 {
		client.Close()
		reader.Close()
		return nil, errors.New("open hbase: gohbase client cannot send raw RPCs")
	}
	s := &Store{opts: opts, zk: zkQuorum, client: client, reader: reader, rpc: rpc, admin: admin, arpc: arpc, tables: map[string]*Table{}}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	ltn, err := hrpc.NewListTableNames(cctx, hrpc.ListRegex(regexp.QuoteMeta(opts.TablePrefix)+".*"))
	if err == nil {
		_, err = admin.ListTableNames(ltn)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open hbase %s: %w", zkQuorum, ctxErr(cctx, err))
	}
	return s, nil
}

// Close closes the connections of the data client. Tables must not be used afterwards.
// (This gohbase version's admin client cannot be closed: its Close panics.)
func (s *Store) Close() error {
	s.client.Close()
	s.reader.Close()
	return nil
}

func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return withDefaultTimeout(ctx, s.opts.CallTimeout)
}

func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// ctxErr makes an error caused by the end of ctx match ctx.Err() under errors.Is.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

// HBaseName returns the HBase table name of the zen table name.
func (s *Store) HBaseName(name string) string { return s.opts.TablePrefix + name }

// Table returns the named table, creating the HBase table (pre-split) if it does not exist.
func (s *Store) Table(ctx context.Context, name string) (zen.Table, error) {
	if err := zen.CheckTableName(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.tables[name]; ok {
		return t, nil
	}
	if err := s.create(ctx, s.HBaseName(name)); err != nil {
		return nil, fmt.Errorf("table %s: %w", name, err)
	}
	t := &Table{s: s, zname: name, name: []byte(s.HBaseName(name)), fam: s.opts.Family,
		families: hrpc.Families(map[string][]string{s.opts.Family: {qualifier}})}
	s.tables[name] = t
	return t, nil
}

// createTable adds the family attributes that gohbase's CreateTable does not pass through.
type createTable struct {
	*hrpc.CreateTable
	attrs map[string]string
}

func (c createTable) ToProto() proto.Message {
	req := c.CreateTable.ToProto().(*pb.CreateTableRequest)
	for _, f := range req.TableSchema.ColumnFamilies {
		for k, v := range c.attrs {
			f.Attributes = append(f.Attributes, &pb.BytesBytesPair{First: []byte(k), Second: []byte(v)})
		}
	}
	return req
}

// create creates the table and waits for the master to finish; an existing table is fine.
func (s *Store) create(ctx context.Context, table string) error {
	ctx, cancel := withDefaultTimeout(ctx, s.opts.CreateTimeout)
	defer cancel()
	ct := createTable{
		CreateTable: hrpc.NewCreateTable(ctx, []byte(table),
			map[string]map[string]string{s.opts.Family: {"VERSIONS": "1"}},
			hrpc.SplitKeys(SplitKeys(s.opts.SplitEvery, s.opts.Shards))),
		attrs: map[string]string{"NEW_VERSION_BEHAVIOR": "true"},
	}
	if s.opts.Replicated {
		ct.attrs["REPLICATION_SCOPE"] = "1"
	}
	msg, err := s.arpc.SendRPC(ct)
	if err != nil {
		if strings.Contains(err.Error(), "TableExistsException") {
			return nil
		}
		return fmt.Errorf("create %s: %w", table, ctxErr(ctx, err))
	}
	res, ok := msg.(*pb.CreateTableResponse)
	if !ok {
		return fmt.Errorf("create %s: unexpected response %T", table, msg)
	}
	backoff := 20 * time.Millisecond
	for {
		msg, err := s.arpc.SendRPC(hrpc.NewGetProcedureState(ctx, res.GetProcId()))
		if err != nil {
			return fmt.Errorf("create %s: procedure %d: %w", table, res.GetProcId(), ctxErr(ctx, err))
		}
		st, ok := msg.(*pb.GetProcedureResultResponse)
		if !ok {
			return fmt.Errorf("create %s: unexpected response %T", table, msg)
		}
		switch st.GetState() {
		case pb.GetProcedureResultResponse_NOT_FOUND:
			return fmt.Errorf("create %s: procedure %d not found", table, res.GetProcId())
		case pb.GetProcedureResultResponse_FINISHED:
			if e := st.GetException().GetGenericException(); e != nil {
				if strings.Contains(e.GetClassName(), "TableExistsException") {
					return nil
				}
				return fmt.Errorf("create %s: %s: %s", table, e.GetClassName(), e.GetMessage())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w", table, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// Drop disables and deletes the HBase table of the zen table name (an administrative and test
// helper; it is not part of zen.Store). A missing table is not an error.
func (s *Store) Drop(ctx context.Context, name string) error {
	if err := zen.CheckTableName(name); err != nil {
		return err
	}
	ctx, cancel := withDefaultTimeout(ctx, s.opts.CreateTimeout)
	defer cancel()
	s.mu.Lock()
	delete(s.tables, name)
	s.mu.Unlock()
	table := []byte(s.HBaseName(name))
	if err := s.admin.DisableTable(hrpc.NewDisableTable(ctx, table)); err != nil &&
		!strings.Contains(err.Error(), "TableNotFoundException") {
		return fmt.Errorf("drop %s: disable: %w", table, ctxErr(ctx, err))
	}
	if err := s.admin.DeleteTable(hrpc.NewDeleteTable(ctx, table)); err != nil &&
		!strings.Contains(err.Error(), "TableNotFoundException") {
		return fmt.Errorf("drop %s: delete: %w", table, ctxErr(ctx, err))
	}
	return nil
}

// Table is one HBase table.
type Table struct {
	s        *Store
	zname    string // the zen table name, for the spans
	name     []byte
	fam      string
	families func(hrpc.Call) error
}

var _ zen.Table = (*Table)(nil)

// MaxKeyLen is the longest row key accepted. The limit lets a reverse scan with no Stop start
// at a row above every valid key (MaxKeyLen bytes of 0xFF): this gohbase version starts a
// reversed scan with an empty start row in the first region instead of the last.
const MaxKeyLen = 1024

// endRow sorts at or above every row key of at most MaxKeyLen bytes.
var endRow = bytes.Repeat([]byte{0xff}, MaxKeyLen)

func checkKey(k []byte) error {
	if len(k) == 0 {
		return errors.New("empty row key")
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("row key of %d bytes (at most %d)", len(k), MaxKeyLen)
	}
	return nil
}

// encodeValue returns the stored form of a zen value (see the package comment).
func encodeValue(v []byte) []byte {
	switch len(v) {
	case 8:
		return bytes.Clone(v)
	case 7:
		return append(bytes.Clone(v), 0, 0)
	default:
		return append(append(make([]byte, 0, len(v)+1), v...), 0)
	}
}

// decodeValue returns the zen value of a stored cell.
func decodeValue(b []byte) ([]byte, error) {
	var v, pad []byte
	switch len(b) {
	case 0:
		return nil, errors.New("empty cell: not written by zenhbase")
	case 8:
		return bytes.Clone(b), nil
	case 9:
		v, pad = b[:7], b[7:]
	default:
		v, pad = b[:len(b)-1], b[len(b)-1:]
	}
	for _, c := range pad {
		if c != 0 {
			return nil, fmt.Errorf("cell of %d bytes with padding %x: not written by zenhbase", len(b), pad)
		}
	}
	return bytes.Clone(v), nil
}

// apply is Apply's work, without its span.
func (t *Table) apply(ctx context.Context, muts []zen.Mutation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	last := make(map[string]int, len(muts))
	for i, m := range muts {
		if err := checkKey(m.Key); err != nil {
			return fmt.Errorf("apply %s: mutation %d: %w", t.name, i, err)
		}
		last[string(m.Key)] = i
	}
	if len(muts) == 0 {
		return nil
	}
	ctx, cancel := t.s.callCtx(ctx)
	defer cancel()
	calls := make([]*hrpc.Mutate, 0, len(last))
	for i, m := range muts {
		if last[string(m.Key)] != i {
			continue
		}
		var c *hrpc.Mutate
		var err error
		if m.Delete {
			c, err = hrpc.NewDel(ctx, t.name, bytes.Clone(m.Key), nil)
		} else {
			c, err = hrpc.NewPut(ctx, t.name, bytes.Clone(m.Key),
				map[string]map[string][]byte{t.fam: {qualifier: encodeValue(m.Value)}})
		}
		if err != nil {
			return fmt.Errorf("apply %s: %w", t.name, err)
		}
		calls = append(calls, c)
	}
	errs := make([]error, len(calls))
	if len(calls) >= batchFrom {
		hc := make([]hrpc.Call, len(calls))
		for i, c := range calls {
			hc[i] = c
		}
		for i, r := range t.s.client.SendBatch(ctx, hc) {
			if r.Error != nil {
				errs[i] = fmt.Errorf("%x: %w", calls[i].Key(), ctxErr(ctx, r.Error))
			}
		}
	} else {
		var wg sync.WaitGroup
		for i, c := range calls {
			wg.Go(func() {
				_, err := t.s.client.Put(c) // sends any Mutate as built: a Put or a row Delete
				if err != nil {
					errs[i] = fmt.Errorf("%x: %w", c.Key(), ctxErr(ctx, err))
				}
			})
		}
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("apply %s: %w", t.name, err)
	}
	return nil
}

var _ zen.MultiGetter = (*Table)(nil)

// batchFrom is the size from which Apply and GetMany send their calls with SendBatch (the
// patched gohbase's, third_party/gohbase/batch.go): grouped by region server into multi
// requests sent at once from the calling goroutine. Smaller ones go call by call, each on its
// own goroutine: a GetMany of one is a Get, and the writes wait in the write client's queue
// for FlushInterval, to share a multi request (and the region server's WAL sync) with other
// callers' writes. From batchFrom calls, a goroutine, a blocking send and a region lookup per
// call cost more than the wait saves: in a CPU profile of make bench-hbase's fanout burst sent
// call by call they were 31% of the process's CPU (docs/pools.md, "HBase").
const batchFrom = 8

var _ zen.MultiScanner = (*Table)(nil)

// maxInflightScans bounds the scans one ScanMany has in flight.
const maxInflightScans = 16

var _ zen.CondBatcher = (*Table)(nil)

// maxInflightCAS bounds the check-and-mutates one CheckAndSetMany has in flight.
const maxInflightCAS = 64
