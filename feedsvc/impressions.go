package feedsvc

import (
	"context"

	"github.com/smartfeed/smartfeed/zen"
)

// Impressions receives every page GetFeed answers, so that what a user was shown is recorded
// as impressions (cmd/smartfeed wires it to the engagement log). Served is called on the
// request's goroutine after the answer is built: it must not block and cannot fail the page,
// so an implementation queues the page and records it in the background.
type Impressions interface {
	Served(ctx context.Context, p ServedPage)
}

// ServedPage is one answered page: the user, the cursor it was asked with ("" for the first
// page) and its items in the order served (an item's index is its position on the page). The
// receiver must not modify Items.
type ServedPage struct {
	User        zen.ID
	Cursor      string
	Items       []PageItem
	FreshStatus FreshStatus
}

// FeedOption configures the FeedService that RegisterFeed registers.
type FeedOption func(*GRPCServer)

// WithImpressions hands every page the FeedService answers with at least one item to imp.
func WithImpressions(imp Impressions) FeedOption {
	return func(g *GRPCServer) { g.impressions = imp }
}

// served hands the answered page p of user to the impression log, if any.
func (g *GRPCServer) served(ctx context.Context, user zen.ID, cursor string, p Page) {
	if g.impressions == nil || len(p.Items) == 0 {
		return
	}
	g.impressions.Served(ctx, ServedPage{User: user, Cursor: cursor, Items: p.Items, FreshStatus: p.FreshStatus})
}
