package graphsvc

import (
	"context"
	"fmt"
	"strings"

	"github.com/smartfeed/smartfeed/zen"
	"github.com/smartfeed/smartfeed/zen/seq"
)

// flushBoards reuses the pending boards an earlier load made (by key) and writes the new ones:
// object, request key, owner's user→boards edge.
func (r *loadRun) flushBoards(ctx context.Context) error {
	if len(r.pendB) == 0 {
		return nil
	}
	pend := r.pendB
	r.pendB = nil
	cs := r.checkBoards(pend)
	keys := make([]string, len(cs))
	for i, c := range cs {
		keys[i] = c.req.key()
	}
	held, err := r.l.g.LookupKeys(ctx, graphKindRequest, keys)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	live, err := r.holdersLive(ctx, held)
	if err != nil {
		return err
	}
	var fresh []boardCand
	var shards []uint16
	var existing []zen.ID
	m := r.l.g.Shards()
	for i, c := range cs {
		if h := held[i]; h != 0 && live[h] {
			r.boards[c.b.Key], r.old[h] = h, true
			r.st.BoardsExisting++
			if r.l.ids != nil {
				r.l.ids("board", c.b.Key, h)
			}
			existing = append(existing, h)
			continue
		}
		fresh = append(fresh, c)
		if s := c.owner.Shard(); m.IsOpen(s) {
			shards = append(shards, s)
		} else {
			shards = append(shards, r.nextShards(1)[0])
		}
	}
	if err := r.recheckBoards(ctx, existing); err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	ids, err := r.allocate(ctx, zen.TypeBoard, shards)
	if err != nil {
		return err
	}
	return r.writeBoards(ctx, fresh, ids)
}

// boardCand is a listed board that passed the checks, with its owner and its request key.
type boardCand struct {
	b     LoadBoard
	owner zen.ID
	req   idem
}

// checkBoards refuses the listed boards without a valid key, with an owner not in the input,
// listed twice or with invalid fields, and returns the rest.
func (r *loadRun) checkBoards(pend []LoadBoard) []boardCand {
	var cs []boardCand
	inChunk := map[string]bool{}
	for _, b := range pend {
		owner, ok := r.users[strings.ToLower(b.Owner)]
		switch {
		case b.Key == "":
			r.refuse(&r.st.BoardsRefused, "board: key is required")
			continue
		case graphCheckRequestID(b.Key) != nil:
			r.refuse(&r.st.BoardsRefused, "board: %s", statusMsg(graphCheckRequestID(b.Key)))
			continue
		case !ok:
			r.refuse(&r.st.BoardsRefused, "board %s: owner is not a user of this input", b.Key)
			continue
		}
		if _, dup := r.boards[b.Key]; dup || inChunk[b.Key] {
			r.refuse(&r.st.BoardsRefused, "board %s: listed twice", b.Key)
			continue
		}
		if err := graphCheckText("name", b.Name, graphMaxName, true); err != nil {
			r.refuse(&r.st.BoardsRefused, "board %s: %s", b.Key, statusMsg(err))
			continue
		}
		if err := graphCheckText("description", b.Description, graphMaxDescription, false); err != nil {
			r.refuse(&r.st.BoardsRefused, "board %s: %s", b.Key, statusMsg(err))
			continue
		}
		inChunk[b.Key] = true
		cs = append(cs, boardCand{b, owner, newIdem("board", owner.String(), b.Key, b.Name, b.Description)})
	}
	return cs
}

// writeBoards writes the new boards' objects, request keys and owner→board edges, ids[i] for
// fresh[i].
func (r *loadRun) writeBoards(ctx context.Context, fresh []boardCand, ids []zen.ID) error {
	for i, c := range fresh {
		id, ms := ids[i], r.createdMs(c.b.CreatedMs)
		if err := r.b.PutObject(ctx, id, map[string]any{
			"owner": c.owner.String(), "name": c.b.Name, "description": c.b.Description,
			"created_ms": ms, "request_fp": c.req.fp,
		}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		if err := r.b.MapKey(ctx, graphKindRequest, c.req.key(), id); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		if err := r.b.AddEdge(ctx, zen.Edge{From: c.owner, Type: zen.EdgeUserBoards, To: id, Seq: seq.FromMillis(ms)}); err != nil {
			return fmt.Errorf("load: %w", err)
		}
		r.count(c.owner, zen.EdgeUserBoards)
		r.boards[c.b.Key] = id
		r.st.Boards++
		if r.l.ids != nil {
			r.l.ids("board", c.b.Key, id)
		}
	}
	return nil
}
