// Package deployment holds a deployment's identity and its claim on a Redis namespace: the ID
// kept in the main store (created on the first start), and the claim that marks the pinlater
// namespace as that deployment's, so that two deployments sharing a Redis never run each other's
// tasks (pinlater.Admin.ClaimNamespace).
package deployment

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/pinlater"
	"github.com/smartfeed/smartfeed/zen"
)

// MetaTable is the main store's table of the deployment's own facts (its ID).
const MetaTable = "meta"

// IDKey is the row of MetaTable holding the deployment ID.
var IDKey = []byte("deployment")

// ID returns the ID of the deployment whose main store holds meta (its MetaTable), creating it
// on the first start: a compare-and-set, so that processes starting together agree on one.
func ID(ctx context.Context, meta zen.Table) (string, error) {
	for range 3 {
		v, err := meta.Get(ctx, IDKey)
		if err == nil {
			return string(v), nil
		}
		if !errors.Is(err, zen.ErrNotFound) {
			return "", fmt.Errorf("deployment id: %w", err)
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		fresh := "dep-" + hex.EncodeToString(b[:])
		ok, err := meta.CheckAndSet(ctx, IDKey, nil, []byte(fresh))
		if err != nil {
			return "", fmt.Errorf("deployment id: %w", err)
		}
		if ok {
			return fresh, nil
		}
	}
	return "", errors.New("deployment id: could not read or create it")
}

// Claimer claims a namespace (pinlater.Admin).
type Claimer interface {
	ClaimNamespace(ctx context.Context, deployment string, takeover bool) (previous string, err error)
}

// Claim is one deployment's claim on its Redis namespace.
type Claim struct {
	Admin      Claimer
	Deployment string
	// Namespace names the namespace in log lines.
	Namespace string
	// Takeover purges a namespace owned by another deployment and claims it.
	Takeover bool
	Log      *zap.Logger
}

// Try claims the namespace (Takeover: purging another owner's first). A Redis that does not
// answer leaves the claim to Loop (pending true): the process starts, not ready, as it would
// for any Redis outage. A namespace another deployment owns is an error telling the operator
// what to do.
func (c Claim) Try(ctx context.Context) (pending bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	prev, err := c.Admin.ClaimNamespace(cctx, c.Deployment, c.Takeover)
	switch {
	case errors.Is(err, pinlater.ErrNamespaceOwned):
		return false, fmt.Errorf("%w: another deployment uses this Redis with the same namespace; give this one its own --redis-namespace, or, if the owner is gone for good, start once with --redis-namespace-takeover (it purges the owner's queues)", err)
	case err != nil:
		c.log().Warn("could not claim the Redis namespace yet (Redis unreachable); retrying in the background",
			zap.String("namespace", c.Namespace), zap.Error(err))
		return true, nil
	case prev != "":
		c.log().Warn("took over the Redis namespace of another deployment and purged its queues",
			zap.String("namespace", c.Namespace), zap.String("previous_owner", prev), zap.String("deployment", c.Deployment))
	}
	return false, nil
}

// Loop retries the claim every 2 s until it succeeds or ctx ends; a namespace owned by another
// deployment ends it with an error.
func (c Claim) Loop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
		pending, err := c.Try(ctx)
		if err != nil {
			c.log().Error("refusing to run on a Redis namespace another deployment owns", zap.Error(err))
			return err
		}
		if !pending {
			return nil
		}
	}
}

func (c Claim) log() *zap.Logger {
	if c.Log == nil {
		return zap.NewNop()
	}
	return c.Log
}
