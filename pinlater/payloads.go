package pinlater

import (
	"errors"
	"fmt"
	"strconv"
)

// PayloadVersion is the payload version this package writes and accepts. Every payload carries it
// in its "v" field; a payload of any other version is refused by Validate.
const PayloadVersion = 1

// Size limits on payload lists. A producer with more must split its work into several tasks.
const (
	MaxInterests    = 64   // FanoutPayload.Interests
	MaxMaterialize  = 1000 // MaterializePayload.Pins
	MaxChunkLimit   = 10000
	maxStringLength = 512 // cursors, chunk IDs, reasons
)

// ErrInvalidPayload is wrapped by every Validate error and by decoding errors, so a handler or a
// producer can tell bad input from a transient failure with errors.Is.
var ErrInvalidPayload = errors.New("invalid payload")

// Payload is a versioned, validated task body. Each payload type names its task type.
type Payload interface {
	// TaskType is the task type this payload belongs to, e.g. TypeFanout.
	TaskType() string
	// Validate refuses zero IDs, an unknown version and oversize lists.
	Validate() error
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidPayload, fmt.Sprintf(format, args...))
}

func checkVersion(typ string, v int) error {
	if v != PayloadVersion {
		return invalid("%s: unknown version %d (want %d)", typ, v, PayloadVersion)
	}
	return nil
}

func checkID(typ, field string, id uint64) error {
	if id == 0 {
		return invalid("%s: %s is zero", typ, field)
	}
	if id>>62 != 0 {
		return invalid("%s: %s %d has reserved top bits set", typ, field, id)
	}
	return nil
}

func checkString(typ, field, s string, required bool) error {
	if required && s == "" {
		return invalid("%s: %s is empty", typ, field)
	}
	if len(s) > maxStringLength {
		return invalid("%s: %s is %d bytes (max %d)", typ, field, len(s), maxStringLength)
	}
	return nil
}

// Target kinds of a follow.
const (
	KindUser     = "user"
	KindBoard    = "board"
	KindInterest = "interest"
)

func checkKind(typ, k string) error {
	switch k {
	case KindUser, KindBoard, KindInterest:
		return nil
	}
	return invalid("%s: target_kind %q (want user, board or interest)", typ, k)
}

// FanoutPayload announces a new pin or repin to be fanned out to the followers of its author, its
// board and its interests. IDs are zen.ID values.
type FanoutPayload struct {
	V          int      `json:"v"`
	Pin        uint64   `json:"pin"`
	Author     uint64   `json:"author"`
	Board      uint64   `json:"board"`
	Interests  []uint64 `json:"interests,omitempty"`
	CreatedMs  int64    `json:"created_ms"`
	Repin      bool     `json:"repin,omitempty"`
	RelatedFor uint64   `json:"related_for,omitempty"` // 0 = none
}

// TaskType implements Payload.
func (FanoutPayload) TaskType() string { return TypeFanout }

// Validate implements Payload.
func (p FanoutPayload) Validate() error {
	t := TypeFanout
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	for _, c := range []struct {
		f  string
		id uint64
	}{{"pin", p.Pin}, {"author", p.Author}, {"board", p.Board}} {
		if err := checkID(t, c.f, c.id); err != nil {
			return err
		}
	}
	if len(p.Interests) > MaxInterests {
		return invalid("%s: %d interests (max %d)", t, len(p.Interests), MaxInterests)
	}
	for i, id := range p.Interests {
		if err := checkID(t, "interests["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
	}
	if p.CreatedMs <= 0 {
		return invalid("%s: created_ms %d", t, p.CreatedMs)
	}
	if p.RelatedFor>>62 != 0 {
		return invalid("%s: related_for %d has reserved top bits set", t, p.RelatedFor)
	}
	return nil
}

// FanoutChunkPayload is one bounded page of a fanout: the receivers listed from edge list
// (ListFrom, EdgeType) starting at Cursor, at most Limit of them.
type FanoutChunkPayload struct {
	V         int    `json:"v"`
	Pin       uint64 `json:"pin"`
	Author    uint64 `json:"author"`
	Board     uint64 `json:"board"`
	Interest  uint64 `json:"interest,omitempty"`
	CreatedMs int64  `json:"created_ms"`
	Source    uint8  `json:"source"` // zen.Source
	ListFrom  uint64 `json:"list_from"`
	EdgeType  uint16 `json:"edge_type"` // zen.EdgeType
	Cursor    string `json:"cursor,omitempty"`
	Limit     int    `json:"limit"`
}

// TaskType implements Payload.
func (FanoutChunkPayload) TaskType() string { return TypeFanoutChunk }

// Validate implements Payload.
func (p FanoutChunkPayload) Validate() error {
	t := TypeFanoutChunk
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	for _, c := range []struct {
		f  string
		id uint64
	}{{"pin", p.Pin}, {"author", p.Author}, {"board", p.Board}, {"list_from", p.ListFrom}} {
		if err := checkID(t, c.f, c.id); err != nil {
			return err
		}
	}
	if p.Interest>>62 != 0 {
		return invalid("%s: interest %d has reserved top bits set", t, p.Interest)
	}
	if p.CreatedMs <= 0 {
		return invalid("%s: created_ms %d", t, p.CreatedMs)
	}
	if p.Source == 0 {
		return invalid("%s: source is zero", t)
	}
	if p.EdgeType == 0 {
		return invalid("%s: edge_type is zero", t)
	}
	if err := checkString(t, "cursor", p.Cursor, false); err != nil {
		return err
	}
	if p.Limit <= 0 || p.Limit > MaxChunkLimit {
		return invalid("%s: limit %d (want 1..%d)", t, p.Limit, MaxChunkLimit)
	}
	return nil
}

// FollowBackfillPayload asks for the recent pins of Target to be put into User's pools after a
// follow.
type FollowBackfillPayload struct {
	V          int    `json:"v"`
	User       uint64 `json:"user"`
	Target     uint64 `json:"target"`
	TargetKind string `json:"target_kind"` // KindUser, KindBoard or KindInterest
}

// TaskType implements Payload.
func (FollowBackfillPayload) TaskType() string { return TypeFollowBackfill }

// Validate implements Payload.
func (p FollowBackfillPayload) Validate() error {
	return validateFollow(TypeFollowBackfill, p.V, p.User, p.Target, p.TargetKind)
}

// UnfollowCleanupPayload asks for the pins that came from Target to leave User's pools.
type UnfollowCleanupPayload struct {
	V          int    `json:"v"`
	User       uint64 `json:"user"`
	Target     uint64 `json:"target"`
	TargetKind string `json:"target_kind"`
}

// TaskType implements Payload.
func (UnfollowCleanupPayload) TaskType() string { return TypeUnfollowCleanup }

// Validate implements Payload.
func (p UnfollowCleanupPayload) Validate() error {
	return validateFollow(TypeUnfollowCleanup, p.V, p.User, p.Target, p.TargetKind)
}

func validateFollow(t string, v int, user, target uint64, kind string) error {
	if err := checkVersion(t, v); err != nil {
		return err
	}
	if err := checkID(t, "user", user); err != nil {
		return err
	}
	if err := checkID(t, "target", target); err != nil {
		return err
	}
	return checkKind(t, kind)
}

// PinDeletePayload removes a deleted pin from pools and feeds.
type PinDeletePayload struct {
	V      int    `json:"v"`
	Pin    uint64 `json:"pin"`
	Author uint64 `json:"author"`
}

// TaskType implements Payload.
func (PinDeletePayload) TaskType() string { return TypePinDelete }

// Validate implements Payload.
func (p PinDeletePayload) Validate() error {
	t := TypePinDelete
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	if err := checkID(t, "pin", p.Pin); err != nil {
		return err
	}
	return checkID(t, "author", p.Author)
}

// UserDeletePayload removes a deleted user's pools and feeds.
type UserDeletePayload struct {
	V    int    `json:"v"`
	User uint64 `json:"user"`
	// Pass is 0 for the deletion itself, which schedules the same work once more as pass 2,
	// for what writers that read the user as live before the deletion wrote after it.
	Pass int `json:"pass,omitempty"`
}

// UserDeleteLastPass is the Pass of a user deletion's second and last run.
const UserDeleteLastPass = 2

// TaskType implements Payload.
func (UserDeletePayload) TaskType() string { return TypeUserDelete }

// Validate implements Payload.
func (p UserDeletePayload) Validate() error {
	if err := checkVersion(TypeUserDelete, p.V); err != nil {
		return err
	}
	if p.Pass != 0 && p.Pass != UserDeleteLastPass {
		return invalid("%s: pass %d is neither 0 nor %d", TypeUserDelete, p.Pass, UserDeleteLastPass)
	}
	return checkID(TypeUserDelete, "user", p.User)
}

// MaterializedPin is one pin of a chunk, in the generator's order.
type MaterializedPin struct {
	Pin    uint64  `json:"pin"`
	Source uint8   `json:"source"` // zen.Source
	Score  float64 `json:"score"`
	Reason string  `json:"reason,omitempty"`
}

// FeedDeletePayload asks the feed service to remove a deleted user's materialized feed.
type FeedDeletePayload struct {
	V    int    `json:"v"`
	User uint64 `json:"user"`
}

// TaskType implements Payload.
func (FeedDeletePayload) TaskType() string { return TypeFeedDelete }

// Validate implements Payload.
func (p FeedDeletePayload) Validate() error {
	if err := checkVersion(TypeFeedDelete, p.V); err != nil {
		return err
	}
	return checkID(TypeFeedDelete, "user", p.User)
}

// TouchPayload tells the worker that User read their feed at AtMs (Unix milliseconds).
type TouchPayload struct {
	V    int    `json:"v"`
	User uint64 `json:"user"`
	AtMs int64  `json:"at_ms"`
}

// TaskType implements Payload.
func (TouchPayload) TaskType() string { return TypeTouch }

// Validate implements Payload.
func (p TouchPayload) Validate() error {
	if err := checkVersion(TypeTouch, p.V); err != nil {
		return err
	}
	if p.AtMs <= 0 {
		return invalid("%s: at_ms %d must be positive", TypeTouch, p.AtMs)
	}
	return checkID(TypeTouch, "user", p.User)
}

// MaterializePayload asks for a served chunk to be put in front of User's materialized feed (and
// the pools to be settled). ChunkID makes it idempotent.
type MaterializePayload struct {
	V       int               `json:"v"`
	User    uint64            `json:"user"`
	ChunkID string            `json:"chunk_id"`
	Pins    []MaterializedPin `json:"pins"`
}

// TaskType implements Payload.
func (MaterializePayload) TaskType() string { return TypeMaterialize }

// Validate implements Payload.
func (p MaterializePayload) Validate() error {
	t := TypeMaterialize
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	if err := checkID(t, "user", p.User); err != nil {
		return err
	}
	if err := checkString(t, "chunk_id", p.ChunkID, true); err != nil {
		return err
	}
	if len(p.Pins) > MaxMaterialize {
		return invalid("%s: %d pins (max %d)", t, len(p.Pins), MaxMaterialize)
	}
	for i, mp := range p.Pins {
		if err := checkID(t, "pins["+strconv.Itoa(i)+"].pin", mp.Pin); err != nil {
			return err
		}
		if mp.Score != mp.Score { // NaN
			return invalid("%s: pins[%d].score is NaN", t, i)
		}
		if err := checkString(t, "reason", mp.Reason, false); err != nil {
			return err
		}
	}
	return nil
}

// RespacePayload asks for the pin sequences of Board to be spread out again.
type RespacePayload struct {
	V     int    `json:"v"`
	Board uint64 `json:"board"`
}

// TaskType implements Payload.
func (RespacePayload) TaskType() string { return TypeRespace }

// Validate implements Payload.
func (p RespacePayload) Validate() error {
	if err := checkVersion(TypeRespace, p.V); err != nil {
		return err
	}
	return checkID(TypeRespace, "board", p.Board)
}
