package pinlater

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// TypeImpressions carries the impressions of several pages the feed served, of any users, from
// the feed's impression log to the worker, which applies each page as an engagement batch.
const TypeImpressions = "impressions"

// Bounds of one impressions task.
const (
	// MaxImpressionPages bounds ImpressionsPayload.Pages.
	MaxImpressionPages = 64
	// MaxImpressionEvents bounds the events of all the pages of one impressions task.
	MaxImpressionEvents = 2000
)

// ImpressionsPayload is a batch of served pages, each an EngagementPayload of impressions only,
// deduplicated by its own (User, RequestID): the worker applies each page once whatever task
// carries it.
type ImpressionsPayload struct {
	V     int                 `json:"v"`
	Pages []EngagementPayload `json:"pages"`
}

// TaskType implements Payload.
func (ImpressionsPayload) TaskType() string { return TypeImpressions }

// Validate implements Payload: 1 to MaxImpressionPages pages, each a valid engagement batch of
// impressions, MaxImpressionEvents events in all at most.
func (p ImpressionsPayload) Validate() error {
	t := TypeImpressions
	if err := checkVersion(t, p.V); err != nil {
		return err
	}
	if len(p.Pages) == 0 || len(p.Pages) > MaxImpressionPages {
		return invalid("%s: %d pages (want 1 to %d)", t, len(p.Pages), MaxImpressionPages)
	}
	n := 0
	for _, pg := range p.Pages {
		n += len(pg.Events)
	}
	if n > MaxImpressionEvents {
		return invalid("%s: %d events in all (max %d)", t, n, MaxImpressionEvents)
	}
	for i, pg := range p.Pages {
		if err := pg.Validate(); err != nil {
			return fmt.Errorf("%s: pages[%d]: %w", t, i, err)
		}
		for j, e := range pg.Events {
			if e.Action != ActionImpression {
				return invalid("%s: pages[%d].events[%d]: action %q (want %s)", t, i, j, e.Action, ActionImpression)
			}
		}
	}
	return nil
}

// NewImpressions builds an impressions task (the versions of the payload and of its pages filled
// in when zero), deduplicated by its pages' users and request IDs in order.
func NewImpressions(p ImpressionsPayload) (*Task, error) {
	withVersion(&p.V)
	pages := make([]EngagementPayload, len(p.Pages))
	copy(pages, p.Pages)
	for i := range pages {
		withVersion(&pages[i].V)
	}
	p.Pages = pages
	return NewTask(p)
}

// impressionsID is "impressions:" and 32 hex digits of a SHA-256 over each page's user and
// request ID, in order.
func impressionsID(p ImpressionsPayload) string {
	h := sha256.New()
	var b [8]byte
	for _, pg := range p.Pages {
		binary.BigEndian.PutUint64(b[:], pg.User)
		h.Write(b[:])
		binary.BigEndian.PutUint64(b[:], uint64(len(pg.RequestID)))
		h.Write(b[:])
		h.Write([]byte(pg.RequestID))
	}
	return TypeImpressions + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}
