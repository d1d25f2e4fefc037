package main

import (
	"context"
	"fmt"

	"github.com/smartfeed/smartfeed/generator"
)

// buildGenerator builds the generator over the pools, its state table and the graph's checks.
func (a *app) buildGenerator(ctx context.Context) error {
	state, err := a.stores.table(ctx, storeMain, tableGenState)
	if err != nil {
		return err
	}
	gc := generator.DefaultConfig()
	if a.cfg.Generator.ConfigFile != "" {
		if gc, err = generator.LoadConfig(a.cfg.Generator.ConfigFile); err != nil {
			return fmt.Errorf("generator config: %w", err)
		}
	}
	a.gen, err = generator.New(generator.Params{Pools: a.hidingPools(ctx), State: state, Config: &gc,
		Logger: a.log.Named("generator"), Registerer: a.reg, Liveness: a.deleted,
		Eligibility: graphEligibility{g: a.graph}})
	if err != nil {
		return fmt.Errorf("generator: %w", err)
	}
	return nil
}
