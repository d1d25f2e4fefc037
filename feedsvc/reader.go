package feedsvc

import (
	"context"

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
