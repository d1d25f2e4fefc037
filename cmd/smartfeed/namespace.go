package main

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

// tableMeta holds the deployment's own facts in the main store (its ID).
const tableMeta = "meta"

var deploymentKey = []byte("deployment")

// deploymentID returns the ID of the deployment whose main store this is, creating it on the
// first start.
func (a *app) deploymentID(ctx context.Context) (string, error) {
	t, err := a.stores.table(ctx, storeMain, tableMeta)
	if err != nil {
		return "", err
	}
	for range 3 {
		v, err := t.Get(ctx, deploymentKey)
		if err == nil {
			return string(v), nil
		}
		if !errors.Is(err, zen.ErrNotFound) {
			return "", fmt.Errorf("deployment id: %w", err)
		}
		var b [12]byte
		_, _ = rand.Read(b[:])
		fresh := "dep-" + hex.EncodeToString(b[:])
		ok, err := t.CheckAndSet(ctx, deploymentKey, nil, []byte(fresh))
		if err != nil {
			return "", fmt.Errorf("deployment id: %w", err)
		}
		if ok {
			return fresh, nil
		}
	}
	return "", errors.New("deployment id: could not read or create it")
}

// claimNamespace claims the Redis namespace for this deployment (see Admin.ClaimNamespace).
// takeover purges a namespace owned by another deployment first. A Redis that does not answer
// leaves the claim to claimLoop (pending true): the process starts, not ready, as it would
// for any Redis outage.
func (a *app) claimNamespace(ctx context.Context, takeover bool) (pending bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	prev, err := a.pinAdmin.ClaimNamespace(cctx, a.deployment, takeover)
	switch {
	case errors.Is(err, pinlater.ErrNamespaceOwned):
		return false, fmt.Errorf("%w: another deployment uses this Redis with the same namespace; give this one its own --redis-namespace, or, if the owner is gone for good, start once with --redis-namespace-takeover (it purges the owner's queues)", err)
	case err != nil:
		a.log.Warn("could not claim the Redis namespace yet (Redis unreachable); retrying in the background",
			zap.String("namespace", a.cfg.Redis.Namespace), zap.Error(err))
		return true, nil
	case prev != "":
		a.log.Warn("took over the Redis namespace of another deployment and purged its queues",
			zap.String("namespace", a.cfg.Redis.Namespace), zap.String("previous_owner", prev), zap.String("deployment", a.deployment))
	}
	return false, nil
}

// claimLoop retries the namespace claim until it succeeds; a namespace owned by another
// deployment ends the process with an error.
func (a *app) claimLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Second):
		}
		pending, err := a.claimNamespace(ctx, a.cfg.Redis.NamespaceTakeover)
		if err != nil {
			a.log.Error("refusing to run on a Redis namespace another deployment owns", zap.Error(err))
			return err
		}
		if !pending {
			return nil
		}
	}
}
