package testenv

import "go.uber.org/goleak"

// LeakOptions are the goleak options of every package's TestMain, with extra appended. It
// ignores gohbase's region-client reader: Close shuts the region connection but does not wait
// for the reader goroutine to notice, so it may still be on its way out when the tests end.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.LeakOptions()...) }
func LeakOptions(extra ...goleak.Option) []goleak.Option {
	return append([]goleak.Option{goleak.IgnoreAnyFunction("github.com/tsuna/gohbase/region.(*client).receiveRPCs")}, extra...)
}
