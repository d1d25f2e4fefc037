package zenhbase

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tsuna/gohbase/hrpc"
	"github.com/tsuna/gohbase/pb"
	"google.golang.org/protobuf/proto"
)

// Region is one region of a table as hbase:meta lists it: where the master has put it.
type Region struct {
	// Start is the region's first row key (empty for the table's first region).
	Start []byte
	// Server is the host:port of the region server holding it ("" while it is unassigned).
	Server string
	// State is the master's state of the region: OPEN when a region server serves it; OPENING,
	// CLOSING, CLOSED and others while it moves (after its server died, for one).
	State string
}

// Regions returns the regions of the zen table name in key order, read from hbase:meta. An
// operator uses it to see how a table is spread over the region servers (RegionsPerServer);
// the cluster fault tests use it to see when the master has reassigned a dead server's regions.
func (s *Store) Regions(ctx context.Context, name string) ([]Region, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	table := s.HBaseName(name)
	// Meta rows are "table,start key,region id.encoded name."; the range [table, table"-")
	// holds exactly this table's rows: '-' follows ',', and no character a table name may
	// hold sorts between them. (A start row of table"," would miss the first region's row
	// under meta's own row order.)
	sc, err := hrpc.NewScanRangeStr(ctx, "hbase:meta", table, table+"-",
		hrpc.Families(map[string][]string{"info": {"regioninfo", "server", "state"}}))
	if err != nil {
		return nil, fmt.Errorf("regions of %s: %w", table, err)
	}
	scanner := s.reader.Scan(sc)
	defer scanner.Close()
	var out []Region
	for {
		r, err := scanner.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("regions of %s: %w", table, ctxErr(ctx, err))
		}
		reg, ok, err := parseMetaRow(r)
		if err != nil {
			return nil, fmt.Errorf("regions of %s: %w", table, err)
		}
		if ok {
			out = append(out, reg)
		}
	}
	return out, nil
}

// pbufMagic leads HBase's protobuf-serialized values in meta.
var pbufMagic = []byte("PBUF")

// parseMetaRow reads one hbase:meta row; ok is false for a row without region info (a parent
// region of a split that meta keeps for a while, for one, has its info but is offline: it is
// left out too).
func parseMetaRow(r *hrpc.Result) (Region, bool, error) {
	var reg Region
	var info *pb.RegionInfo
	for _, c := range r.Cells {
		switch string(c.Qualifier) {
		case "regioninfo":
			if !bytes.HasPrefix(c.Value, pbufMagic) {
				return Region{}, false, errors.New("meta region info without its PBUF prefix")
			}
			info = &pb.RegionInfo{}
			if err := proto.Unmarshal(c.Value[len(pbufMagic):], info); err != nil {
				return Region{}, false, fmt.Errorf("meta region info: %w", err)
			}
		case "server":
			reg.Server = string(c.Value)
		case "state":
			reg.State = string(c.Value)
		}
	}
	if info == nil || info.GetOffline() || info.GetSplit() {
		return Region{}, false, nil
	}
	reg.Start = info.GetStartKey()
	return reg, true, nil
}

// RegionsPerServer counts the open regions of rs per region server.
func RegionsPerServer(rs []Region) map[string]int {
	out := map[string]int{}
	for _, r := range rs {
		if r.State == "OPEN" && r.Server != "" {
			out[r.Server]++
		}
	}
	return out
}
