package main

import (
	"context"
	"fmt"
	"io"

	"github.com/smartfeed/smartfeed/bench"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/worker"
)

// runBenchProfile runs the profile bf names: learn, or a run of the system (runBench).
func runBenchProfile(ctx context.Context, cfg config.Config, bf benchFlags, stdout io.Writer) error {
	if bf.profile == "learn" {
		return runLearnBench(ctx, bf, stdout)
	}
	return runBench(ctx, cfg, bf, stdout)
}

// runLearnBench is `smartfeed bench --profile learn`: simulated users with latent interests are
// served by the scoring model in use, engage with what they are shown by those interests, the
// impression log is trained on, and the learned model serves the next round (bench.RunLearn).
// It prints the rounds and writes learn.json, learn.md and learn.png into bf.out. The baseline
// beside it is the worker's default weights without their engagement terms: the fixed model of a
// feed that records no engagement.
func runLearnBench(ctx context.Context, bf benchFlags, stdout io.Writer) error {
	c := bench.DefaultLearnConfig(worker.DefaultWeights().Model())
	base := worker.DefaultWeights()
	base.EngAuthor, base.EngBoard, base.EngInterest, base.EngSource, base.HiddenAuthor = 0, 0, 0, 0, 0
	c.Baseline = base.Model()
	fmt.Fprintf(stdout, "smartfeed bench: profile learn, %d simulated users, %d rounds (seed %d)\n", c.Users, c.Rounds, c.Seed)
	res, err := bench.RunLearn(ctx, c)
	if err != nil {
		return fmt.Errorf("bench learn: %w", err)
	}
	fmt.Fprint(stdout, res.String())
	if err := bench.WriteLearn(bf.out, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "results in %s (learn.json, learn.md, learn.png)\n", bf.out)
	return nil
}
