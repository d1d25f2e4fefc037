package config

// validateResources reports (through bad) the feed's resource bounds out of range: its
// background lanes and its head cache's memory.
func (f Feed) validateResources(bad func(format string, args ...any)) {
	if f.BackgroundLanes < 0 || f.BackgroundLanes > 1024 {
		bad("feed.background_lanes: %d not in [0, 1024]", f.BackgroundLanes)
	}
	if f.BackgroundNice < 0 || f.BackgroundNice > 19 {
		bad("feed.background_nice: %d not in [0, 19]", f.BackgroundNice)
	}
	if f.HeadCacheMB < 0 || f.HeadCacheMB > 1<<20 {
		bad("feed.head_cache_mb: %d not in [0, 1048576]", f.HeadCacheMB)
	}
}

// HeadCacheBytes is feedsvc.Deps.HeadCacheBytes from HeadCacheMB: 0 (no cache) is negative there.
func (f Feed) HeadCacheBytes() int64 {
	if f.HeadCacheMB == 0 {
		return -1
	}
	return int64(f.HeadCacheMB) << 20
}
