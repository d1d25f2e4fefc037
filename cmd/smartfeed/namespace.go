package main

import (
	"context"

	"github.com/smartfeed/smartfeed/internal/deployment"
)

// tableMeta holds the deployment's own facts in the main store (its ID).
const tableMeta = deployment.MetaTable

// deploymentID returns the ID of the deployment whose main store this is, creating it on the
// first start.
func (a *app) deploymentID(ctx context.Context) (string, error) {
	t, err := a.stores.table(ctx, storeMain, tableMeta)
	if err != nil {
		return "", err
	}
	return deployment.ID(ctx, t)
}

// namespaceClaim is this process's claim on its Redis namespace (deployment.Claim).
func (a *app) namespaceClaim() deployment.Claim {
	return deployment.Claim{Admin: a.pinAdmin, Deployment: a.deployment, Namespace: a.cfg.Redis.Namespace,
		Takeover: a.cfg.Redis.NamespaceTakeover, Log: a.log}
}
