package zenpebble

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/smartfeed/smartfeed/zen"
)

// TestUnclean: a database is unclean when its last process did not Close it (its machine
// crashed: the crash image), clean when new or closed, and the marker of a clean close is
// taken by the next Open, so that a crash after it is seen too.
func TestUnclean(t *testing.T) {
	ctx := context.Background()
	fs := vfs.NewCrashableMem()
	open := func(fs vfs.FS) *Store {
		t.Helper()
		s, err := Open("db", WithFS(fs))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write := func(s *Store) {
		t.Helper()
		tb, err := s.Table(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if err := tb.Apply(ctx, []zen.Mutation{{Key: []byte("k"), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	s := open(fs)
	if s.Unclean() {
		t.Fatal("a new database is unclean")
	}
	write(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(fs)
	if s.Unclean() {
		t.Fatal("unclean after a Close")
	}
	write(s)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{}) // the machine stops here: no Close
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c := open(crashed)
	if !c.Unclean() {
		t.Fatal("clean after a crash")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c = open(crashed); c.Unclean() {
		t.Fatal("still unclean after the crashed database was opened and closed")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	m, err := Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Unclean() {
		t.Fatal("an in-memory database is unclean")
	}
}
