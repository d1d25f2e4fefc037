package pinlater

import "strconv"

// TypeEngagement carries a batch of one user's feed engagement (impressions, close-ups, clicks,
// saves, likes, hides) from the engagement service to the worker, which records it in the store.
const TypeEngagement = "engagement"

// MaxEngagementEvents bounds one engagement task (and so one EngagementService.Report call).
const MaxEngagementEvents = 500

// MaxEngagementRequestID bounds the client's idempotency key of an engagement batch.
const MaxEngagementRequestID = 128

// Engagement actions, as EngagementEvent.Action spells them.
const (
	ActionImpression = "impression"
	ActionCloseup    = "closeup"
	ActionClick      = "click"
	ActionSave       = "save"
	ActionLike       = "like"
	ActionHide       = "hide"
)

// EngagementPayload is a batch of User's engagement, deduplicated by (User, RequestID): a
// retried report is one task, and the worker applies a batch once whatever runs it.
type EngagementPayload struct {
	V         int    `json:"v"`
	User      uint64 `json:"user"`
	RequestID string `json:"request_id"`
	// Arm is the experiment arm the user was in when the batch was reported.
	Arm    string            `json:"arm,omitempty"`
	Events []EngagementEvent `json:"events"`
}

// EngagementEvent is one thing the user did with one pin.
type EngagementEvent struct {
	Action   string `json:"action"`
	Pin      uint64 `json:"pin"`
	Position int    `json:"position"`
	Fresh    bool   `json:"fresh,omitempty"`
	Source   string `json:"source,omitempty"` // a zen source name; "" = following
	AtMs     int64  `json:"at_ms"`
}

// TaskType implements Payload.
func (EngagementPayload) TaskType() string { return TypeEngagement }

// Validate implements Payload.
func (p EngagementPayload) Validate() error {
	t := TypeEngagement
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	if err := checkID(t, "user", p.User); err != nil {
		return err
	}
	if p.RequestID == "" || len(p.RequestID) > MaxEngagementRequestID {
		return invalid("%s: request_id is %d bytes (want 1 to %d)", t, len(p.RequestID), MaxEngagementRequestID)
	}
	if err := checkString(t, "arm", p.Arm, false); err != nil {
		return err
	}
	if len(p.Events) == 0 || len(p.Events) > MaxEngagementEvents {
		return invalid("%s: %d events (want 1 to %d)", t, len(p.Events), MaxEngagementEvents)
	}
	for i, e := range p.Events {
		f := "events[" + strconv.Itoa(i) + "]"
		switch e.Action {
		case ActionImpression, ActionCloseup, ActionClick, ActionSave, ActionLike, ActionHide:
		default:
			return invalid("%s: %s: unknown action (%d bytes)", t, f, len(e.Action))
		}
		if err := checkID(t, f+".pin", e.Pin); err != nil {
			return err
		}
		if e.Position < 0 || e.AtMs <= 0 {
			return invalid("%s: %s: position %d, at_ms %d", t, f, e.Position, e.AtMs)
		}
		if err := checkString(t, f+".source", e.Source, false); err != nil {
			return err
		}
	}
	return nil
}

// NewEngagement builds an engagement task, deduplicated by (user, request ID).
func NewEngagement(p EngagementPayload) (*Task, error) { withVersion(&p.V); return NewTask(p) }
