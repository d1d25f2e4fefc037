package feedsvc

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	feedv1 "github.com/smartfeed/smartfeed/proto/feed/v1"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// ObjectLookup reads the objects a page's items name, for GetFeed's include_objects. The
// feed service declares it and the process wiring supplies it (the graph store of a process
// that has one, or RemoteObjects of the process it calls), since services never import each
// other.
type ObjectLookup interface {
	// Objects returns the live objects among ids, keyed by ID: a deleted or unknown ID is
	// absent. ids are pins and users, at most a page's worth of each, without duplicates.
	Objects(ctx context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error)
}

// ObjectsTimeout bounds the objects read of one page (include_objects): past it the page is
// served without objects, flagged objects_unavailable, rather than later or not at all.
const ObjectsTimeout = time.Second

// RemoteObjects reads the objects from GraphService.GetObjects of another process (the
// generator process a feed process calls, which serves the graph's reads): one call per page.
type RemoteObjects struct {
	// Client is the GraphService of that process.
	Client graphv1.GraphServiceClient
}

// Objects implements ObjectLookup.
func (r RemoteObjects) Objects(ctx context.Context, ids []zen.ID) (map[zen.ID]*graphv1.Object, error) {
	req := &graphv1.GetObjectsRequest{Ids: make([]uint64, len(ids))}
	for i, id := range ids {
		req.Ids[i] = uint64(id)
	}
	resp, err := r.Client.GetObjects(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("GraphService.GetObjects: %w", err)
	}
	out := make(map[zen.ID]*graphv1.Object, len(resp.GetObjects()))
	for _, o := range resp.GetObjects() {
		if id := objectID(o); id != 0 {
			out[id] = o
		}
	}
	return out, nil
}

// objectID is the ID of whichever object o holds.
func objectID(o *graphv1.Object) zen.ID {
	switch k := o.GetKind().(type) {
	case *graphv1.Object_Pin:
		return zen.ID(k.Pin.GetId())
	case *graphv1.Object_User:
		return zen.ID(k.User.GetId())
	case *graphv1.Object_Board:
		return zen.ID(k.Board.GetId())
	case *graphv1.Object_Interest:
		return zen.ID(k.Interest.GetId())
	}
	return 0
}

// pageObjects attaches the objects of include_objects to a page.
type pageObjects struct {
	lookup  ObjectLookup
	timeout time.Duration
	// unavailable counts the pages served without their objects.
	unavailable prometheus.Counter
}

func newPageObjects(lookup ObjectLookup, reg prometheus.Registerer) (*pageObjects, error) {
	p := &pageObjects{lookup: lookup, timeout: ObjectsTimeout,
		unavailable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "smartfeed_feed_objects_unavailable_total",
			Help: "GetFeed pages asked with include_objects and served without them (flagged objects_unavailable): the objects read failed or passed its deadline."}),
	}
	if reg != nil {
		if err := reg.Register(p.unavailable); err != nil {
			return nil, fmt.Errorf("register feed objects metrics: %w", err)
		}
	}
	return p, nil
}

// attach sets each item's pin and author from one lookup of the page's pins and authors; an
// item whose pin is gone (deleted since it was fanned out) keeps neither. When the lookup fails
// or passes its deadline the page keeps IDs only and says so: the page was read (and its chunk
// taken), so failing the call would lose more than the objects.
func (p *pageObjects) attach(ctx context.Context, resp *feedv1.GetFeedResponse) {
	items := resp.GetItems()
	if len(items) == 0 {
		return
	}
	ids := make([]zen.ID, 0, 2*len(items))
	seen := make(map[zen.ID]bool, 2*len(items))
	for _, it := range items {
		for _, id := range []zen.ID{zen.ID(it.GetPinId()), zen.ID(it.GetAuthorId())} {
			if id != 0 && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	objs, err := p.lookup.Objects(ctx, ids)
	if err != nil {
		p.unavailable.Inc()
		resp.ObjectsUnavailable = true
		resp.ObjectsDetail = fmt.Sprintf("objects not read (%v); read them with GraphService.GetObjects or ask again", err)
		return
	}
	for _, it := range items {
		pin := objs[zen.ID(it.GetPinId())].GetPin()
		if pin == nil {
			continue
		}
		it.Pin, it.Author = pin, objs[zen.ID(it.GetAuthorId())].GetUser()
	}
}
