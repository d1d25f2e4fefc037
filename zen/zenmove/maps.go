package zenmove

import (
	"context"
	"errors"
	"fmt"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/zenroute"
)

// Local publishes shard maps inside this one process: the Maps of a move whose source is the
// embedded store (Pebble admits one process), or of any single-process deployment.
type Local struct {
	// Router routes the shard-keyed tables; its Swap waits for the writes in flight.
	Router *zenroute.Store
	// Setters also receive every published map (zen.Graph.SetShards, for placing new objects).
	Setters []func(*zen.ShardMap)
	// Persist, when set, saves a map durably before it is installed (so a restart routes by the
	// switched map); a failure publishes nothing.
	Persist func(ctx context.Context, m *zen.ShardMap) error
}

// Current returns the router's map.
func (l *Local) Current() *zen.ShardMap { return l.Router.Shards() }

// Publish persists m (when Persist is set), installs it in the router, waiting for the writes in
// flight under the previous map, and hands it to the setters.
func (l *Local) Publish(ctx context.Context, m *zen.ShardMap) error {
	if l.Router == nil {
		return errors.New("zenmove: local maps without a router")
	}
	if l.Persist != nil {
		if err := l.Persist(ctx, m); err != nil {
			return fmt.Errorf("persist shard map: %w", err)
		}
	}
	if err := l.Router.Swap(ctx, m); err != nil {
		return err
	}
	for _, set := range l.Setters {
		set(m)
	}
	return nil
}
