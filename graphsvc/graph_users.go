package graphsvc

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"unicode"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/smartfeed/smartfeed/internal/quote"
	"github.com/smartfeed/smartfeed/pinlater"
	graphv1 "github.com/smartfeed/smartfeed/proto/graph/v1"
	"github.com/smartfeed/smartfeed/zen"
)

// graphCheckUsername refuses a username that is empty, too long or has other characters than
// [A-Za-z0-9_.].
func graphCheckUsername(u string) error {
	if u == "" {
		return graphInvalid("username is required")
	}
	if len(u) > graphMaxUsername {
		return graphInvalid("username is %d bytes, at most %d", len(u), graphMaxUsername)
	}
	for _, r := range u {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '.')) {
			return graphInvalid("username %q: only letters, digits, '_' and '.' are allowed", u)
		}
	}
	return nil
}

// graphCheckEmail refuses an address without exactly one '@' between non-empty parts, with space
// or control characters, or too long.
func graphCheckEmail(e string) error {
	if e == "" {
		return graphInvalid("email is required")
	}
	if len(e) > graphMaxEmail {
		return graphInvalid("email is %d bytes, at most %d", len(e), graphMaxEmail)
	}
	at := strings.IndexByte(e, '@')
	if at <= 0 || at == len(e)-1 || strings.Count(e, "@") != 1 || !strings.Contains(e[at:], ".") {
		return graphInvalid("email %q is not an address (want local@domain.tld)", e)
	}
	if strings.IndexFunc(e, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return graphInvalid("email %q contains space or control characters", e)
	}
	return nil
}

// graphCheckText refuses text over max bytes, or empty when required, or with control characters
// other than newline and tab.
func graphCheckText(field, v string, max int, required bool) error {
	if required && strings.TrimSpace(v) == "" {
		return graphInvalid("%s is required", field)
	}
	if len(v) > max {
		return graphInvalid("%s is %d bytes, at most %d", field, len(v), max)
	}
	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) >= 0 {
		return graphInvalid("%s contains control characters", field)
	}
	return nil
}

// graphCheckURL refuses anything but an absolute http(s) URL of at most graphMaxURL bytes.
func graphCheckURL(field, v string, required bool) error {
	if v == "" {
		if required {
			return graphInvalid("%s is required", field)
		}
		return nil
	}
	if len(v) > graphMaxURL {
		return graphInvalid("%s is %d bytes, at most %d", field, len(v), graphMaxURL)
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return graphInvalid("%s %q is not an absolute http(s) URL", field, v)
	}
	return nil
}

func graphCheckRequestID(rid string) error {
	if len(rid) > graphMaxRequestID {
		return graphInvalid("request_id is %d bytes, at most %d", len(rid), graphMaxRequestID)
	}
	return nil
}

// claim maps a unique key to id. A key held by an object that no longer lives (a user deleted
// before its names were freed) is taken over. It reports false when a live object holds it.
func (s *GraphService) claim(ctx context.Context, kind, key string, id zen.ID) (bool, error) {
	for range 3 {
		ok, err := s.g.MapKey(ctx, kind, key, id)
		if err != nil {
			return false, s.fail("claim "+kind, err)
		}
		if ok {
			return true, nil
		}
		holder, err := s.g.LookupKey(ctx, kind, key)
		if errors.Is(err, zen.ErrNotFound) {
			continue // freed in between
		}
		if err != nil {
			return false, s.fail("claim "+kind, err)
		}
		if _, err := s.g.Get(ctx, holder); err == nil {
			return false, nil
		} else if !errors.Is(err, zen.ErrNotFound) {
			return false, s.fail("claim "+kind, err)
		}
		if _, err := s.g.UnmapKey(ctx, kind, key, holder); err != nil {
			return false, s.fail("claim "+kind, err)
		}
	}
	return false, status.Errorf(codes.Aborted, "%s %s: contended; retry", kind, quote.Q(key))
}

// holderLive reports whether a live object other than self holds key.
func (s *GraphService) holderLive(ctx context.Context, kind, key string, self zen.ID) (bool, error) {
	holder, err := s.g.LookupKey(ctx, kind, key)
	if errors.Is(err, zen.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, s.fail("look up "+kind, err)
	}
	if holder == self {
		return false, nil
	}
	if _, err := s.g.Get(ctx, holder); errors.Is(err, zen.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, s.fail("look up "+kind, err)
	}
	return true, nil
}

// CreateUser creates a user with a unique username and email (both unique ignoring case, mapped
// through the mod shard). Order: the user object, then the username claim, then the email claim;
// a refused claim deletes the new object and frees what it had claimed.
func (s *GraphService) CreateUser(ctx context.Context, req *graphv1.CreateUserRequest) (*graphv1.User, error) {
	if err := graphCheckUsername(req.GetUsername()); err != nil {
		return nil, err
	}
	if err := graphCheckEmail(req.GetEmail()); err != nil {
		return nil, err
	}
	if err := graphCheckText("display_name", req.GetDisplayName(), graphMaxDisplayName, false); err != nil {
		return nil, err
	}
	if err := graphCheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	name, email, rid := strings.ToLower(req.GetUsername()), strings.ToLower(req.GetEmail()), req.GetRequestId()
	r := newIdem("user", name, rid, name, email, req.GetDisplayName())
	// Refuse a taken name before creating anything (the claims below are what make it exact).
	self, err := s.replayed(ctx, r)
	if err != nil {
		return nil, err
	}
	for _, k := range [][2]string{{graphKindUsername, name}, {graphKindEmail, email}} {
		taken, err := s.holderLive(ctx, k[0], k[1], self)
		if err != nil {
			return nil, err
		}
		if taken {
			return nil, status.Errorf(codes.AlreadyExists, "%s %s is taken", k[0], quote.Q(k[1]))
		}
	}
	o, _, err := s.create(ctx, r, zen.TypeUser, 0, map[string]any{
		"username": req.GetUsername(), "email": email, "display_name": req.GetDisplayName(),
		"created_ms": s.now().UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	ok, err := s.claim(ctx, graphKindUsername, name, o.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.undoUser(ctx, o.ID, r, "")
		return nil, status.Errorf(codes.AlreadyExists, "username %s is taken", quote.Q(name))
	}
	ok, err = s.claim(ctx, graphKindEmail, email, o.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.undoUser(ctx, o.ID, r, name)
		return nil, status.Errorf(codes.AlreadyExists, "email %s is taken", quote.Q(email))
	}
	return graphUserMsg(o), nil
}

// undoUser deletes a user whose create lost a uniqueness race, freeing its username claim.
func (s *GraphService) undoUser(ctx context.Context, id zen.ID, r idem, name string) {
	if name != "" {
		if _, err := s.g.UnmapKey(ctx, graphKindUsername, name, id); err != nil {
			s.log.Warn("free username", zap.Stringer("user", id), zap.Error(err))
		}
	}
	s.forget(ctx, r, id)
	if err := s.g.Delete(ctx, id); err != nil {
		s.log.Warn("delete refused user", zap.Stringer("user", id), zap.Error(err))
	}
}

// GetUser returns a live user.
func (s *GraphService) GetUser(ctx context.Context, req *graphv1.GetUserRequest) (*graphv1.User, error) {
	id, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	o, err := s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return graphUserMsg(o), nil
}

// GetUserByName returns the live user with a username (ignoring case).
func (s *GraphService) GetUserByName(ctx context.Context, req *graphv1.GetUserByNameRequest) (*graphv1.User, error) {
	if err := graphCheckUsername(req.GetUsername()); err != nil {
		return nil, err
	}
	name := strings.ToLower(req.GetUsername())
	id, err := s.g.LookupKey(ctx, graphKindUsername, name)
	if errors.Is(err, zen.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no user named %s", quote.Q(name))
	}
	if err != nil {
		return nil, s.fail("get user by name", err)
	}
	o, err := s.g.Get(ctx, id)
	if errors.Is(err, zen.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no user named %s", quote.Q(name))
	}
	if err != nil {
		return nil, s.fail("get user by name", err)
	}
	return graphUserMsg(o), nil
}

// DeleteUser soft-deletes a user, frees its username and email, and enqueues user-delete.
// Deleting a deleted user succeeds (already_deleted) and enqueues the event again, so a retry
// after a failed enqueue completes; names left mapped by a crash are taken over by the next
// CreateUser that wants them.
func (s *GraphService) DeleteUser(ctx context.Context, req *graphv1.DeleteUserRequest) (*graphv1.DeleteUserResponse, error) {
	id, err := graphTypedID("user_id", req.GetUserId(), req.GetUserIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	resp := &graphv1.DeleteUserResponse{}
	o, err := s.g.Get(ctx, id)
	switch {
	case errors.Is(err, zen.ErrNotFound):
		// Absent (NotFound from Delete) or deleted already (Delete succeeds).
		if err := s.g.Delete(ctx, id); errors.Is(err, zen.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "user %d not found", id)
		} else if err != nil {
			return nil, s.fail("delete user", err)
		}
		resp.AlreadyDeleted = true
	case err != nil:
		return nil, s.fail("delete user", err)
	default:
		if err := s.g.Delete(ctx, id); err != nil {
			return nil, s.fail("delete user", err)
		}
		for _, k := range [][2]string{
			{graphKindUsername, strings.ToLower(graphStr(o.Data, "username"))},
			{graphKindEmail, graphStr(o.Data, "email")},
		} {
			if k[1] == "" {
				continue
			}
			if _, err := s.g.UnmapKey(ctx, k[0], k[1], id); err != nil {
				return nil, s.fail("free "+k[0], err)
			}
		}
	}
	// Hide what the user owns before answering: their pins and boards are soft-deleted, so every
	// read filter (GetObjects, ListPins, fresh chunks, materialized pages) drops them at once;
	// the user-delete job then purges the pins from pools and lists.
	if err := s.g.DeleteOwned(ctx, id); err != nil {
		return nil, s.fail("delete what the user owns", err)
	}
	if err := s.enqueue(ctx, "delete user "+id.String(), pinlater.UserDeletePayload{V: pinlater.PayloadVersion, User: uint64(id)}); err != nil {
		return nil, err
	}
	return resp, nil
}

// CreateBoard creates a board owned by a live user, on the owner's shard when that shard is open,
// and writes the owner's user→boards edge.
func (s *GraphService) CreateBoard(ctx context.Context, req *graphv1.CreateBoardRequest) (*graphv1.Board, error) {
	owner, err := graphTypedID("owner_id", req.GetOwnerId(), req.GetOwnerIdStr(), zen.TypeUser)
	if err != nil {
		return nil, err
	}
	if err := graphCheckText("name", req.GetName(), graphMaxName, true); err != nil {
		return nil, err
	}
	if err := graphCheckText("description", req.GetDescription(), graphMaxDescription, false); err != nil {
		return nil, err
	}
	if err := graphCheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	if _, err := s.get(ctx, owner); err != nil {
		return nil, err
	}
	o, _, err := s.create(ctx, newIdem("board", owner.String(), req.GetRequestId(), req.GetName(), req.GetDescription()), zen.TypeBoard, owner, map[string]any{
		"owner": owner.String(), "name": req.GetName(), "description": req.GetDescription(),
		"created_ms": s.now().UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	if err := s.g.AddEdge(ctx, zen.Edge{From: owner, Type: zen.EdgeUserBoards, To: o.ID, Seq: graphSeq(o)}); err != nil {
		return nil, s.fail("add user→boards", err)
	}
	return graphBoardMsg(o), nil
}

// CreateInterest creates an interest with a unique name (ignoring case).
func (s *GraphService) CreateInterest(ctx context.Context, req *graphv1.CreateInterestRequest) (*graphv1.Interest, error) {
	if err := graphCheckText("name", req.GetName(), graphMaxName, true); err != nil {
		return nil, err
	}
	if err := graphCheckRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	key, rid := strings.ToLower(req.GetName()), req.GetRequestId()
	r := newIdem("interest", key, rid, key)
	self, err := s.replayed(ctx, r)
	if err != nil {
		return nil, err
	}
	if taken, err := s.holderLive(ctx, graphKindInterest, key, self); err != nil {
		return nil, err
	} else if taken {
		return nil, status.Errorf(codes.AlreadyExists, "interest %s exists", quote.Q(key))
	}
	o, _, err := s.create(ctx, r, zen.TypeInterest, 0, map[string]any{
		"name": req.GetName(), "created_ms": s.now().UnixMilli(),
	})
	if err != nil {
		return nil, err
	}
	ok, err := s.claim(ctx, graphKindInterest, key, o.ID)
	if err != nil {
		return nil, err
	}
	if !ok {
		s.forget(ctx, r, o.ID)
		if err := s.g.Delete(ctx, o.ID); err != nil {
			s.log.Warn("delete refused interest", zap.Stringer("interest", o.ID), zap.Error(err))
		}
		return nil, status.Errorf(codes.AlreadyExists, "interest %s exists", quote.Q(key))
	}
	return graphInterestMsg(o), nil
}
