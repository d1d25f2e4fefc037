package config

import (
	"github.com/spf13/pflag"
)

// DefaultLearnedPercent is Engagement.LearnedPercent's default: a new model starts on a tenth
// of the users.
const DefaultLearnedPercent = 10

// Engagement configures what the feed learns from engagement (docs/engagement.md): the learned
// scoring model and the experiment that serves it to a share of the users.
type Engagement struct {
	// ModelFile is a learned model (written by `smartfeed train`), watched and reloaded live by
	// the worker; a file that is refused (wrong features, NaN weights) is logged and counted and
	// the model in use keeps serving. Default empty: every user is scored with the weights
	// (worker.weights_file).
	ModelFile string `json:"model_file"`
	// LearnedPercent is the share of users, 0 to 100 by a stable hash of the user, scored with
	// ModelFile: the "learned" arm; the others are the "default" arm. Default 10.
	LearnedPercent int `json:"learned_percent"`
	// Salt of the arm hash: another salt reshuffles the users between arms. Default empty.
	Salt string `json:"salt"`
	// OnlineFeatures: the fanout reads each receiver's engagement profile (one batched read
	// per page of receivers) and scores with it. false records engagement and hides but scores
	// everyone as a user without engagement. Default true.
	OnlineFeatures bool `json:"online_features"`
	// ServedImpressions: GetFeed records the pins of every page it serves as impressions
	// (positions, fresh status, the user's arm), through the engagement task a client's Report
	// enqueues, queued in memory and enqueued in the background (best effort: a full queue or a
	// failed enqueue drops the page's impressions and counts them; a page never waits or fails
	// for them). Default true.
	ServedImpressions bool `json:"served_impressions"`
}

// bindScoring defines the flags of the scorer's weights and the engagement settings.
func bindScoring(fs *pflag.FlagSet, c *Config) {
	s, i, b := fs.StringVar, fs.IntVar, fs.BoolVar
	s(&c.Worker.WeightsFile, "weights", c.Worker.WeightsFile, "JSON weights of the pool scorer (worker.Weights); empty: the defaults")
	s(&c.Engagement.ModelFile, "model-file", c.Engagement.ModelFile, "learned scoring model file (smartfeed train), reloaded live; empty: the weights for everyone")
	i(&c.Engagement.LearnedPercent, "learned-percent", c.Engagement.LearnedPercent, "percent of users (stable hash) scored with --model-file: the learned arm")
	s(&c.Engagement.Salt, "experiment-salt", c.Engagement.Salt, "salt of the experiment's arm hash (another salt reshuffles users)")
	b(&c.Engagement.ServedImpressions, "served-impressions", c.Engagement.ServedImpressions, "GetFeed records the pins of every page it serves as impressions (in the background, best effort)")
	b(&c.Engagement.OnlineFeatures, "online-features", c.Engagement.OnlineFeatures, "score with each receiver's engagement profile (one batched read per page of receivers at fanout)")
}
