package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/smartfeed/smartfeed/engagement"
	"github.com/smartfeed/smartfeed/internal/config"
	"github.com/smartfeed/smartfeed/worker"
)

// newTrainCmd is `smartfeed train`: fit the scoring model to the impression log.
func newTrainCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "train",
		Short: "fit the scoring model to the impression log and write a versioned model file",
		Long: `Reads the impression log (the engagement table of the main store: every pin shown, with the
features it was scored with and what the user did next), holds out the newest --test-fraction of it,
fits a logistic model to the rest, and prints the AUC and log-loss of the learned model and of the
model in use (--model-file when set, else the weights) on the held-out impressions, with each
experiment arm's engagement rate. Writes <--out>/model-v<N>.json (N: the model in use's version + 1)
unless the learned model's AUC is below the current one's (--force writes it anyway). With
--install, the new file is also copied over --model-file, which the workers reload live.
See docs/engagement.md. Takes the same storage flags as the servers.`,
		Args: cobra.NoArgs,
	}
	fs := cmd.Flags()
	out := fs.String("out", "models", "directory of the versioned model files")
	testFraction := fs.Float64("test-fraction", 0.2, "newest share of impressions held out for evaluation")
	force := fs.Bool("force", false, "write the model even when its held-out AUC is below the current model's")
	install := fs.Bool("install", false, "also copy the new model over --model-file (the workers reload it)")
	for _, n := range []string{"out", "test-fraction", "force", "install"} {
		noEnv(fs, n)
	}
	resolve := configFlags(fs, config.DefaultConfig(), getenv)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := resolve(cmd)
		if err != nil {
			return err
		}
		return runTrain(cmd, cfg, *out, *testFraction, *force, *install)
	}
	return cmd
}

// currentModel is the model serving now: the model file's, else the weights'.
func currentModel(cfg config.Config) (*engagement.Model, error) {
	if f := cfg.Engagement.ModelFile; f != "" {
		m, err := engagement.LoadModel(f)
		if err == nil {
			return m, nil
		}
		return nil, fmt.Errorf("train: the model in use: %w", err)
	}
	w := worker.DefaultWeights()
	if f := cfg.Worker.WeightsFile; f != "" {
		var err error
		if w, err = worker.LoadWeights(f); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	return w.Model(), nil
}

func runTrain(cmd *cobra.Command, cfg config.Config, out string, testFraction float64, force, install bool) error {
	if cfg.Storage.Stores != "" || cfg.Storage.ShardMap.File != "" || cfg.Storage.ShardMap.ZK != "" {
		return errors.New("train: reads the main store over the default shard map; --stores and a shard map are not supported")
	}
	if install && cfg.Engagement.ModelFile == "" {
		return errors.New("train: --install needs --model-file (the file the workers read)")
	}
	cur, err := currentModel(cfg)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st := newStores(cfg.Storage, zap.NewNop(), nil)
	defer func() { _ = st.close() }()
	t, err := st.table(ctx, storeMain, engagement.Table)
	if err != nil {
		return fmt.Errorf("train: %w (with the embedded store, stop the servers first)", err)
	}
	ex, err := engagement.NewStore(t, 0, nil).Examples(ctx)
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	v := cur.Version + 1
	res, err := engagement.Train(ex, cur, engagement.TrainOptions{TestFraction: testFraction, Version: v,
		Name: "learned", NowMs: time.Now().UnixMilli()})
	if err != nil {
		return err
	}
	fmt.Fprint(cmd.OutOrStdout(), res.String())
	if !res.Better && !force {
		return fmt.Errorf("train: refused: the learned model's held-out AUC %.4f is below the current model's %.4f (--force writes it anyway)",
			res.Learned.AUC, res.Current.AUC)
	}
	path, err := engagement.WriteModel(out, res.Model)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", path)
	if install {
		if err := engagement.Install(path, cfg.Engagement.ModelFile); err != nil {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "installed over %s: the workers load it at their next check\n", cfg.Engagement.ModelFile)
	}
	return nil
}
