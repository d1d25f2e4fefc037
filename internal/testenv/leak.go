package testenv

import "go.uber.org/goleak"

// LeakOptions are the goleak options of every package's TestMain, with extra appended. It
// ignores two library goroutines that may still be on their way out when the tests end:
// gohbase's region-client reader (Close shuts the region connection but does not wait for the
// reader to notice) and go-redis's redial probe of a node that refused a dial (a test that
// kills a Redis leaves one; after the client's Close it ends within a second's sleep).
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LeakOptions()...) }
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{
		goleak.IgnoreAnyFunction("github.com/tsuna/gohbase/region.(*client).receiveRPCs"),
		// A scan left early closes its region scanner in the background, for at most 10 s.
		goleak.IgnoreAnyFunction("github.com/tsuna/gohbase.(*scanner).sendClose"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		// A background lane's thread waits up to a second for more work before it ends.
		goleak.IgnoreAnyFunction("github.com/smartfeed/smartfeed/internal/quiet.(*Lanes).idle"),
	}, extra...)
}
