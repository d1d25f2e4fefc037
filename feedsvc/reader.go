package feedsvc

import (
	"context"
	"time"

	"github.com/smartfeed/smartfeed/zen"
)

type readerKey struct{}

// withReader names, in the context of a page's Liveness check, the user the page is for, so a
// Liveness may also leave out what that user asked not to see (their hidden pins).
func withReader(ctx context.Context, user zen.ID) context.Context {
	return context.WithValue(ctx, readerKey{}, user)
}

// ReaderOf returns the user whose page a Liveness check is for, when the check is for a page.
func ReaderOf(ctx context.Context) (zen.ID, bool) {
	u, ok := ctx.Value(readerKey{}).(zen.ID)
	return u, ok
}

type pageStartKey struct{}

// withPageStart records in the context of a page's work when the page began (GetFeed): what the
// page must not serve is what was acknowledged deleted or hidden before then, so a check made
// for the page may rely on a read of the deletion log that began at or after it
// (DeletedSet.CatchUp) instead of reading again.
func withPageStart(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, pageStartKey{}, at)
}

// pageStartOf returns when the page whose work ctx is for began, when it is a page's.
func pageStartOf(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(pageStartKey{}).(time.Time)
	return t, ok
}
