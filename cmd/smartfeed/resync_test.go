package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/zen"
)

// TestResyncUser: `smartfeed resync --user` repairs one user's rows on the standby at once
// (feedsvc.Resync): the primary's row copied, the standby's stray row deleted, another user's
// rows left alone; a malformed or non-user ID is refused before anything opens.
func TestResyncUser(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	alice, _ := zen.NewID(1, zen.TypeUser, 1)
	bob, _ := zen.NewID(1, zen.TypeUser, 2)
	board, _ := zen.NewID(1, zen.TypeBoard, 1)
	// A per-user row of the feed table: user (8 bytes big-endian), kind 'f', then the rest.
	row := func(u zen.ID, rest string) []byte {
		return append(binary.BigEndian.AppendUint64(nil, uint64(u)), append([]byte{'f'}, rest...)...)
	}
	cfg := config.DefaultConfig()
	cfg.Storage.DataDir = dir
	st := newStores(cfg.Storage, zap.NewNop(), nil)
	primary, err := st.table(ctx, storePrimary, tableFeed)
	if err != nil {
		t.Fatal(err)
	}
	standby, err := st.table(ctx, storeStandby, tableFeed)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(primary.Apply(ctx, []zen.Mutation{{Key: row(alice, "1"), Value: []byte("a1")}}))
	must(standby.Apply(ctx, []zen.Mutation{{Key: row(alice, "9"), Value: []byte("stray")}, {Key: row(bob, "9"), Value: []byte("bob's")}}))
	must(st.close())

	args := []string{"resync", "--data-dir", dir, "--user", alice.String()}
	var out bytes.Buffer
	must(run(ctx, args, &out, io.Discard))
	if !strings.Contains(out.String(), "2 standby rows changed") {
		t.Errorf("resync said %q, want 2 standby rows changed", out.String())
	}

	st = newStores(cfg.Storage, zap.NewNop(), nil)
	defer func() { _ = st.close() }()
	standby, err = st.table(ctx, storeStandby, tableFeed)
	must(err)
	rows, err := standby.Scan(ctx, zen.ScanOptions{})
	must(err)
	var got []string
	for _, kv := range rows {
		got = append(got, string(kv.Value))
	}
	if strings.Join(got, ",") != "a1,bob's" {
		t.Errorf("standby holds %q, want a1 (copied) and bob's (untouched)", got)
	}

	for _, bad := range []string{"abc", board.String()} {
		if err := run(ctx, []string{"resync", "--data-dir", dir, "--user", bad}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "resync --user") {
			t.Errorf("--user %s: err %v", bad, err)
		}
	}
}
